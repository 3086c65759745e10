package homes

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/klog/v2"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

// The reasons of refusals that come from claims, in the causes of a 503
// Status (each cause's field names the peer or, for a conflict, the
// shard). The mirror refuses consistent reads with the first two as well.
const (
	// ReasonHomeUnreachable: a peer did not answer in time: asked for its
	// table before a claim (the shard may be homed there), or, at a
	// mirror, for its revision of the data read.
	ReasonHomeUnreachable = "HomeUnreachable"
	// ReasonHomeConflict: two caches claim the shard at the same generation.
	ReasonHomeConflict = "HomeConflict"
	// ReasonHomeClaiming: a peer is claiming the shard at this moment.
	ReasonHomeClaiming = "HomeClaiming"
)

// Admit decides a write into shard's partition here: nil accepts it.
func (t *Table) Admit(ctx context.Context, shard string) *apierrors.StatusError {
	if t.isAdopting(shard) {
		select {
		case <-t.adoptDone:
		case <-time.After(t.cfg.FreshnessWait):
			return t.unavailable(shard, fmt.Sprintf("this cache is adopting shard %q and has not claimed it yet", shard), nil)
		case <-ctx.Done():
			return apierrors.NewTimeoutError("the request ended", 1)
		}
	}
	if c, conflict, ok := t.Lookup(shard); ok {
		return t.decide(shard, c, conflict)
	}
	t.claimMu.Lock()
	defer t.claimMu.Unlock()
	if c, conflict, ok := t.Lookup(shard); ok {
		return t.decide(shard, c, conflict)
	}
	t.mu.Lock()
	t.claiming[shard] = true
	t.mu.Unlock()
	// Cleared only once the claim (if any) is in the table: a peer asking
	// meanwhile sees "claiming" or the claim, never nothing.
	defer func() {
		t.mu.Lock()
		delete(t.claiming, shard)
		t.mu.Unlock()
	}()
	// Every cache is asked, not only the peers: beyond a relay the shard
	// may be claimed, or being claimed, by a cache this one does not peer
	// (search.go).
	found := t.Search(ctx, shard, true)
	if c, conflict, ok := t.Lookup(shard); ok {
		return t.decide(shard, c, conflict)
	}
	if len(found.Unreached) > 0 {
		var causes []metav1.StatusCause
		var names []string
		for _, u := range found.Unreached {
			names = append(names, u.Cache)
			causes = append(causes, metav1.StatusCause{Type: ReasonHomeUnreachable, Field: u.Cache,
				Message: fmt.Sprintf("the cache %q (asked by %q) did not say whether it knows the home of shard %q: %s", u.Cache, u.Via, shard, u.Message)})
		}
		return t.unavailable(shard, fmt.Sprintf("this cache knows no home of shard %q and cannot ask every cache (%s did not answer): the shard may be homed there", shard, strings.Join(names, ", ")), causes)
	}
	if len(found.Claiming) > 0 {
		var causes []metav1.StatusCause
		for _, name := range found.Claiming {
			causes = append(causes, metav1.StatusCause{Type: ReasonHomeClaiming, Field: name, Message: fmt.Sprintf("the cache %q is claiming shard %q at this moment", name, shard)})
		}
		return t.unavailable(shard, fmt.Sprintf("caches (%s) are claiming shard %q at this moment; retry", strings.Join(found.Claiming, ", "), shard), causes)
	}
	c := kcpcache.HomeClaim{Shard: shard, Home: t.cfg.CacheName, Generation: 1}
	t.mu.Lock()
	t.claims[shard] = c
	t.mu.Unlock()
	if err := t.save(ctx); err != nil {
		t.mu.Lock()
		delete(t.claims, shard)
		t.mu.Unlock()
		return t.unavailable(shard, fmt.Sprintf("persisting the claim of shard %q: %v", shard, err), nil)
	}
	homeInfo.WithLabelValues(shard, t.cfg.CacheName).Set(1)
	klog.FromContext(ctx).Info("Claimed a shard's home: no peer knows another", "shard", shard, "generation", 1)
	return nil
}

func (t *Table) decide(shard string, c kcpcache.HomeClaim, conflict string) *apierrors.StatusError {
	if conflict != "" {
		return t.unavailable(shard, conflictMessage(shard, c, conflict), []metav1.StatusCause{{Type: ReasonHomeConflict, Field: shard, Message: conflictMessage(shard, c, conflict)}})
	}
	if c.Home == t.cfg.CacheName {
		return nil
	}
	return apierrors.NewForbidden(schema.GroupResource{}, "", fmt.Errorf("the home of shard %q is the cache %q (claim generation %d): the shard writes there, and this cache mirrors it", shard, c.Home, c.Generation))
}

func conflictMessage(shard string, c kcpcache.HomeClaim, other string) string {
	return fmt.Sprintf("the caches %q and %q both claim shard %q at generation %d; resolve with --adopt-shard=%s at the cache that should be its home", c.Home, other, shard, c.Generation, shard)
}

func (t *Table) unavailable(shard, msg string, causes []metav1.StatusCause) *apierrors.StatusError {
	err := apierrors.NewServiceUnavailable(msg)
	err.ErrStatus.Details = &metav1.StatusDetails{Name: shard, Causes: causes, RetryAfterSeconds: 1}
	return err
}

// WithWriteAdmission admits every write into a shard's partition, by any
// client, by the claims (Admit), around the data plane (after
// authentication, authorization and request info): 403 naming the home
// when another cache holds the claim, 503 with a reason when this cache
// cannot tell. The server's own writes are exempt: the mirror's copies,
// over loopback as user.APIServerUser (the purger writes to etcd
// directly). Writes into the system scope and the wildcard are not a
// partition's.
func WithWriteAdmission(handler http.Handler, t *Table, codecs runtime.NegotiatedSerializer) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		ctx := req.Context()
		info, ok := request.RequestInfoFrom(ctx)
		scope, scoped := kcpcache.ScopeFrom(ctx)
		if ok && info.IsResourceRequest && scoped && !scope.IsSystem() {
			switch info.Verb {
			case "create", "update", "patch", "delete", "deletecollection":
				if !admitWrite(w, req, scope, t, codecs) {
					return
				}
			}
		}
		handler.ServeHTTP(w, req)
	})
}

// admitWrite admits a write into scope's partition by the claims, or
// answers the refusal.
func admitWrite(w http.ResponseWriter, req *http.Request, scope kcpcache.Scope, t *Table, codecs runtime.NegotiatedSerializer) bool {
	if u, ok := request.UserFrom(req.Context()); ok && u.GetName() == user.APIServerUser {
		return true
	}
	if scope.Shard == kcpcache.Wildcard {
		return true
	}
	if err := t.Admit(req.Context(), scope.Shard); err != nil {
		klog.FromContext(req.Context()).V(2).Info("Refusing a write into a partition this cache is not the home of", "shard", scope.Shard, "code", err.ErrStatus.Code, "reason", err.ErrStatus.Message)
		responsewriters.ErrorNegotiated(err, codecs, schema.GroupVersion{}, w, req)
		return false
	}
	return true
}
