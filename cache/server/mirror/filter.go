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

// PartitionRevisions tells the revision of the last change this cache knows of
// in a shard's data of a type (the home revision tracker).
type PartitionRevisions interface {
	Known(shard string, gr schema.GroupResource) (int64, bool)
}

// ServingConfig is what the hierarchy filter needs besides the mirror.
type ServingConfig struct {
	// CacheName is this cache's name (--cache-name); Epoch its current epoch.
	CacheName string
	Epoch     func() string
	// PartitionRevisions answers this cache's own revisions, for the home-revision
	// header of the partitions whose home it is; nil sends none.
	PartitionRevisions PartitionRevisions
	// StorageRevision reads the local storage's revision, so that a stale
	// read is served at least as new as its home-revision header says
	// (header.go); nil serves it as asked.
	StorageRevision StorageRevision
	// PassesOnTo reports whether this cache passes a resource on to a peer
	// (--pass-on); nil: everything to every peer.
	PassesOnTo func(peer string, gr string) bool
	Codecs     runtime.NegotiatedSerializer
}

// WithHierarchy serves the reads of a named cache, around the data plane
// (after authentication, authorization and request info; its writes are
// admitted by homes.WithWriteAdmission):
//   - a consistent read (no resourceVersion) of data whose home is a peer
//     is confirmed with the home first (Mirror.Confirm), or refused with 503
//     ServiceUnavailable, one cause per home that could not confirm it;
//   - a read that names a resourceVersion ("0" included) is served from the
//     local copy at once, with the homes' revisions it reflects and their
//     age in response headers;
//   - a read by anyone but a peer or this server is served copies without
//     their bookkeeping (kcpcache.CopyBookkeeping), unless it asks for it
//     with kcpcache.CopyBookkeepingHeader.
//
// m may be nil (no peers): then reads are only served without the copy
// bookkeeping.
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
		if peer, isPeer := peerOf(req); isPeer && cfg.PassesOnTo != nil && !cfg.PassesOnTo(peer, gr.String()) {
			err := apierrors.NewForbidden(gr, info.Name, fmt.Errorf("this cache passes on to the cache %q only some resources (--pass-on), not this one", peer))
			responsewriters.ErrorNegotiated(err, cfg.Codecs, schema.GroupVersion{}, w, req)
			return
		}
		switch info.Verb {
		case "get", "list", "watch":
			if !exemptFromChecks(req) && req.Header.Get(kcpcache.CopyBookkeepingHeader) != "keep" {
				// Copies are served as their home serves them (partition
				// package, bookkeeping.go).
				req = req.WithContext(kcpcache.WithoutCopyBookkeeping(ctx))
				ctx = req.Context()
			}
			if m == nil || exemptFromChecks(req) {
				break
			}
			if refused := m.NotPassedOn(scope.Shard, gr); len(refused) > 0 {
				err := apierrors.NewServiceUnavailable(fmt.Sprintf("this cache does not hold this data: %v", refused[0]))
				err.ErrStatus.Details = &metav1.StatusDetails{Group: gr.Group, Kind: gr.Resource, Causes: statusCauses(refused)}
				responsewriters.ErrorNegotiated(err, cfg.Codecs, schema.GroupVersion{}, w, req)
				return
			}
			consistent := req.URL.Query().Get("resourceVersion") == ""
			var entries []kcpcache.HomeRevision
			{
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
					release, held := func() {}, 0
					if info.Verb != "watch" {
						release, held = m.holdStreams(scope.Shard, gr)
					}
					stale, ages := m.Stale(scope.Shard, gr)
					entries = stale
					if len(ages) > 0 {
						w.Header().Set(kcpcache.FreshnessAgeHeader, kcpcache.FormatFreshnessAges(ages))
					}
					if held > 0 {
						// With or without entries: served at a revision
						// fixed while the streams are held (header.go).
						entries = m.coverStaleRead(req, entries, cfg.StorageRevision, info.Verb == "list")
					}
					// A GET keeps the streams until it is answered; a LIST
					// is served at an exact revision and lets them go now
					// (header.go).
					if info.Verb == "get" {
						defer release()
					} else {
						release()
					}
				}
			}
			if cfg.PartitionRevisions != nil && consistent && m.isHomeHere(scope.Shard) {
				if rev, ok := cfg.PartitionRevisions.Known(scope.Shard, gr); ok {
					entries = append(entries, kcpcache.HomeRevision{Home: cfg.CacheName, Epoch: cfg.Epoch(), Revision: rev})
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
	if _, isPeer := peerOf(req); isPeer {
		return true
	}
	u, ok := request.UserFrom(req.Context())
	return ok && u.GetName() == user.APIServerUser
}

// peerOf returns the peer cache req comes from, if it does.
func peerOf(req *http.Request) (string, bool) {
	u, ok := request.UserFrom(req.Context())
	if !ok {
		return "", false
	}
	return kcpcache.PeerFromUser(u.GetName())
}

// coverStaleRead makes the stale read req serve every write its header
// entries count and nothing the streams applied after (header.go), exactly
// at that local revision when exact, and returns the entries to send: none
// for a read that asks for an exact resourceVersion or a newer one, or
// when the local revision cannot be read.
func (m *Mirror) coverStaleRead(req *http.Request, entries []kcpcache.HomeRevision, current StorageRevision, exact bool) []kcpcache.HomeRevision {
	if current == nil {
		return entries
	}
	rev, err := m.coveringRevision(req.Context(), current)
	if err != nil {
		klog.FromContext(req.Context()).V(2).Info("Serving a stale read without its home-revision header: the local revision is unknown", "err", err)
		return nil
	}
	if !serveAt(req, rev, exact) {
		return nil
	}
	return entries
}

// isHomeHere reports whether a read of shard may cover data whose home is
// this cache: the wildcard, a shard homed here, or one nobody is known to
// be the home of. A nil mirror (no peers) is the home of everything.
func (m *Mirror) isHomeHere(shard string) bool {
	if m == nil || shard == kcpcache.Wildcard {
		return true
	}
	c, _, ok := m.homes.Lookup(shard)
	return !ok || c.Home == m.cfg.CacheName
}
