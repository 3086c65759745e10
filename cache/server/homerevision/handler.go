package homerevision

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/klog/v2"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

// BarrierTimeout bounds how long Handler waits for the tracker to reach
// etcd's revision before it answers 503: a mirror asking is itself bounded,
// and an answer after its deadline is of no use to it.
const BarrierTimeout = 5 * time.Second

// The query parameters of kcpcache.RevisionPath.
const (
	ShardParameter    = "shard"
	ResourceParameter = "resource"
)

// Relay answers the revision questions about data this cache relays (a
// home's partitions it mirrors and serves onward): package mirror.
type Relay interface {
	AnswerRevision(ctx context.Context, shard, home string, gr schema.GroupResource) (kcpcache.HomeRevisionAnswer, *apierrors.StatusError)
}

// Handler serves kcpcache.RevisionPath: GET with shard (a shard name or
// kcpcache.Wildcard) and resource ("<resource>.<group>", or "<resource>"
// for the core group; an identity resource as stored,
// "<resource>:<identity>.<group>") answers a kcpcache.HomeRevisionAnswer from
// t.Revision, naming this cache and its current epoch. Anything else
// answers a Kubernetes Status: 400 for missing or malformed parameters,
// 405 for other methods, 503 while the tracker is not ready or behind, and
// 503 for a shard that elsewhere reports to be homed at another cache
// (elsewhere may be nil): a cache that gave a shard up must not confirm a
// mirror's copy of it, since the shard writes at its new home now. With
// the parameter kcpcache.RevisionHomeParameter naming another cache, the
// question is about that home's data, which relay answers (nil: 503, this
// cache relays nothing).
func Handler(t *Tracker, name string, epoch func() string, elsewhere func(shard string) (home string, generation int64, ok bool), relay Relay) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodGet {
			w.Header().Set("Allow", http.MethodGet)
			writeStatus(w, apierrors.NewMethodNotSupported(schema.GroupResource{Resource: "revision"}, req.Method))
			return
		}
		shard, gr, home, err := parseQuery(req)
		if err != nil {
			writeStatus(w, apierrors.NewBadRequest(err.Error()))
			return
		}
		if home != "" && home != name {
			if relay == nil {
				writeStatus(w, apierrors.NewServiceUnavailable(fmt.Sprintf("this cache relays no home; %q is not this cache", home)))
				return
			}
			answer, status := relay.AnswerRevision(req.Context(), shard, home, gr)
			if status != nil {
				w.Header().Set("Retry-After", "1")
				writeStatus(w, status)
				return
			}
			writeAnswer(w, answer)
			return
		}
		if elsewhere != nil && shard != kcpcache.Wildcard {
			if home, gen, ok := elsewhere(shard); ok {
				w.Header().Set("Retry-After", "1")
				writeStatus(w, apierrors.NewServiceUnavailable(fmt.Sprintf("the home of shard %q is the cache %q (claim generation %d), not this one: ask it", shard, home, gen)))
				return
			}
		}
		if _, ready := t.Known(shard, gr); !ready {
			// Not the barrier's timeout: a mirror may ask another instance.
			w.Header().Set("Retry-After", "1")
			writeStatus(w, apierrors.NewServiceUnavailable(ErrNotReady.Error()))
			return
		}
		// The epoch is read before the barrier: should it change meanwhile,
		// the answer names the older epoch, which a reader compares with
		// nothing newer.
		answer := kcpcache.HomeRevisionAnswer{Cache: name, Epoch: epoch()}
		ctx, cancel := context.WithTimeout(req.Context(), BarrierTimeout)
		defer cancel()
		answer.Revision, err = t.Revision(ctx, shard, gr)
		if err != nil {
			klog.FromContext(req.Context()).V(2).Info("Home revision not answered", "shard", shard, "resource", gr.String(), "err", err)
			reason := "the cache has not confirmed its revision of shard " + shard + "'s " + gr.String() + ": " + err.Error()
			if errors.Is(err, ErrNotReady) {
				reason = ErrNotReady.Error()
			}
			status := apierrors.NewServiceUnavailable(reason)
			w.Header().Set("Retry-After", "1")
			writeStatus(w, status)
			return
		}
		writeAnswer(w, answer)
	})
}

// RevisionsHandler serves kcpcache.RevisionsPath: GET answers a
// kcpcache.HomeRevisionsAnswer from t.Snapshot, naming this cache and its
// current epoch; 405 for other methods, 503 while the tracker is not ready.
func RevisionsHandler(t *Tracker, name string, epoch func() string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodGet {
			w.Header().Set("Allow", http.MethodGet)
			writeStatus(w, apierrors.NewMethodNotSupported(schema.GroupResource{Resource: "revisions"}, req.Method))
			return
		}
		answer := kcpcache.HomeRevisionsAnswer{Cache: name, Epoch: epoch()}
		var ready bool
		answer.Processed, answer.Partitions, ready = t.Snapshot()
		if !ready {
			w.Header().Set("Retry-After", "1")
			writeStatus(w, apierrors.NewServiceUnavailable(ErrNotReady.Error()))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_ = json.NewEncoder(w).Encode(answer)
	})
}

// parseQuery reads and checks the shard, the resource and the home (""
// when not given).
func parseQuery(req *http.Request) (string, schema.GroupResource, string, error) {
	q := req.URL.Query()
	for _, p := range []string{ShardParameter, ResourceParameter} {
		if len(q[p]) != 1 {
			return "", schema.GroupResource{}, "", fmt.Errorf("%s needs exactly one %q parameter, given %d", kcpcache.RevisionPath, p, len(q[p]))
		}
	}
	shard := q.Get(ShardParameter)
	if shard != kcpcache.Wildcard {
		if err := kcpcache.ValidateShardName(shard); err != nil {
			return "", schema.GroupResource{}, "", fmt.Errorf("parameter %q: %w", ShardParameter, err)
		}
	}
	resource := q.Get(ResourceParameter)
	gr := schema.ParseGroupResource(resource)
	if err := validateResource(gr.Resource); err != nil {
		return "", schema.GroupResource{}, "", fmt.Errorf("parameter %q: %w", ResourceParameter, err)
	}
	if gr.Group != "" {
		if errs := validation.IsDNS1123Subdomain(gr.Group); len(errs) > 0 {
			return "", schema.GroupResource{}, "", fmt.Errorf("parameter %q: group %q: %s", ResourceParameter, gr.Group, strings.Join(errs, "; "))
		}
	}
	if len(q[kcpcache.RevisionHomeParameter]) > 1 {
		return "", schema.GroupResource{}, "", fmt.Errorf("%s takes at most one %q parameter, given %d", kcpcache.RevisionPath, kcpcache.RevisionHomeParameter, len(q[kcpcache.RevisionHomeParameter]))
	}
	home := q.Get(kcpcache.RevisionHomeParameter)
	if home != "" {
		if err := kcpcache.ValidateCacheName(home); err != nil {
			return "", schema.GroupResource{}, "", fmt.Errorf("parameter %q: %w", kcpcache.RevisionHomeParameter, err)
		}
	}
	return shard, gr, home, nil
}

// validateResource accepts a resource's plural, or an identity resource
// as it is stored: "<plural>:<identity>" (kcp's identities are hex digests,
// longer than a DNS label).
func validateResource(resource string) error {
	plural, identity, hasIdentity := strings.Cut(resource, ":")
	if errs := validation.IsDNS1123Label(plural); len(errs) > 0 {
		return fmt.Errorf("resource %q: %s", resource, strings.Join(errs, "; "))
	}
	if hasIdentity && (identity == "" || strings.Trim(identity, "abcdefghijklmnopqrstuvwxyz0123456789") != "") {
		return fmt.Errorf("resource %q: the identity after \":\" must be lowercase letters and digits", resource)
	}
	return nil
}

// writeAnswer answers a revision question's answer as JSON.
func writeAnswer(w http.ResponseWriter, answer kcpcache.HomeRevisionAnswer) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(answer)
}

// writeStatus answers with err's Status as JSON, the one encoding of this
// path.
func writeStatus(w http.ResponseWriter, err *apierrors.StatusError) {
	status := err.Status()
	status.Kind, status.APIVersion = "Status", "v1"
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(int(status.Code))
	_ = json.NewEncoder(w).Encode(status)
}
