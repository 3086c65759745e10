package mirror

import (
	"fmt"
	"net/http"

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

// LocalRevisions tells the revision of the last change this cache knows of
// in a shard's data of a type (the home revision tracker).
type LocalRevisions interface {
	Known(shard string, gr schema.GroupResource) (int64, bool)
}

// ServingConfig is what the hierarchy filter needs besides the mirror.
type ServingConfig struct {
	// Self is this cache's name; Epoch its current epoch.
	Self  string
	Epoch func() string
	// Local answers this cache's own revisions, for the home-revision
	// header of the partitions whose home it is; nil sends none.
	Local  LocalRevisions
	Codecs runtime.NegotiatedSerializer
}

// WithHierarchy serves a cache's part in a hierarchy, around the data
// plane (after authentication, authorization and request info):
//   - a shard writes only at its home: a shard whose home is a peer is
//     refused with 403 here, and a shard that writes here makes this cache
//     its home;
//   - a consistent read (no resourceVersion) of data whose home is a peer
//     is confirmed with the home first (Mirror.Confirm), or refused with 503
//     ServiceUnavailable, one cause per home that could not confirm it;
//   - a read that names a resourceVersion ("0" included) is served from the
//     local copy at once, with the homes' revisions it reflects and their
//     age in response headers.
//
// m may be nil (no peers): then only this cache's own revisions are sent.
func WithHierarchy(handler http.Handler, m *Mirror, cfg ServingConfig) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		ctx := req.Context()
		info, ok := request.RequestInfoFrom(ctx)
		scope, scoped := kcpcache.ScopeFrom(ctx)
		if !ok || !info.IsResourceRequest || !scoped || scope.IsSystem() {
			handler.ServeHTTP(w, req)
			return
		}
		gr := schema.GroupResource{Group: info.APIGroup, Resource: info.Resource}
		switch info.Verb {
		case "create", "update", "patch", "delete", "deletecollection":
			if m != nil && !m.admitWrite(w, req, scope, cfg.Codecs) {
				return
			}
		case "get", "list", "watch":
			if exemptFromChecks(req) {
				break
			}
			consistent := req.URL.Query().Get("resourceVersion") == ""
			var entries []kcpcache.HomeRevision
			if m != nil {
				if consistent {
					confirmed, failed := m.Confirm(ctx, scope.Shard, gr)
					if len(failed) > 0 {
						klog.FromContext(ctx).V(2).Info("Refusing a consistent read of mirrored data", "shard", scope.Shard, "resource", gr.String(), "reasons", len(failed))
						err := apierrors.NewServiceUnavailable(fmt.Sprintf("this cache cannot confirm that its copy is current: %v", failed[0]))
						err.ErrStatus.Details = &metav1.StatusDetails{Group: gr.Group, Kind: gr.Resource, Causes: statusCauses(failed)}
						responsewriters.ErrorNegotiated(err, cfg.Codecs, schema.GroupVersion{}, w, req)
						return
					}
					entries = confirmed
				} else {
					stale, ages := m.Stale(scope.Shard, gr)
					entries = stale
					if len(ages) > 0 {
						w.Header().Set(kcpcache.FreshnessAgeHeader, FormatAges(ages))
					}
				}
			}
			if cfg.Local != nil && consistent && m.isHomeHere(scope.Shard) {
				if rev, ok := cfg.Local.Known(scope.Shard, gr); ok {
					entries = append(entries, kcpcache.HomeRevision{Home: cfg.Self, Epoch: cfg.Epoch(), Revision: rev})
				}
			}
			if len(entries) > 0 {
				w.Header().Set(kcpcache.HomeRevisionHeader, kcpcache.FormatHomeRevisions(entries))
			}
		}
		handler.ServeHTTP(w, req)
	})
}

// exemptFromChecks: reads by peer caches and by this server itself (the
// mirror's own local lists, over loopback as user.APIServerUser) are
// served without freshness checks. A peer takes only the objects whose
// home is this cache, which are current here by definition; checking
// would make every mirror's list wait on its peer's peers.
func exemptFromChecks(req *http.Request) bool {
	u, ok := request.UserFrom(req.Context())
	if !ok {
		return false
	}
	if _, isPeer := kcpcache.PeerFromUser(u.GetName()); isPeer {
		return true
	}
	return u.GetName() == user.APIServerUser
}

// isHomeHere reports whether a read of shard may cover data whose home is
// this cache: the wildcard, a shard homed here, or one nobody is known to
// be the home of. A nil mirror (no peers) is the home of everything.
func (m *Mirror) isHomeHere(shard string) bool {
	if m == nil || shard == kcpcache.Wildcard {
		return true
	}
	home, ok := m.HomeOf(shard)
	return !ok || home == m.cfg.Self
}

// admitWrite refuses a shard's write to its partition here when its home
// is a peer, and otherwise records this cache as its home.
func (m *Mirror) admitWrite(w http.ResponseWriter, req *http.Request, scope kcpcache.Scope, codecs runtime.NegotiatedSerializer) bool {
	u, ok := request.UserFrom(req.Context())
	if !ok {
		return true
	}
	shard, isShard := kcpcache.ShardFromUser(u.GetName())
	if !isShard || shard != scope.Shard {
		return true
	}
	if home, ok := m.HomeOf(shard); ok && home != m.cfg.Self {
		err := apierrors.NewForbidden(schema.GroupResource{}, "", fmt.Errorf("the home of shard %q is the cache %q: the shard writes there, and this cache mirrors it", shard, home))
		responsewriters.ErrorNegotiated(err, codecs, schema.GroupVersion{}, w, req)
		return false
	}
	m.RecordLocalWrite(req.Context(), shard)
	return true
}
