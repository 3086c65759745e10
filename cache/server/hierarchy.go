package server

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/options"
	"github.com/kcp-cache/kcp-cache/cache/server/dataplane"
	"github.com/kcp-cache/kcp-cache/cache/server/homerevision"
	"github.com/kcp-cache/kcp-cache/cache/server/mirror"
)

// MirrorHookName mirrors the partitions whose home is a peer cache.
const MirrorHookName = "kcp-cache-mirror"

// hierarchyConfig reads the peers' kubeconfigs.
func hierarchyConfig(o *options.HierarchyOptions) (HierarchyConfig, error) {
	peers, err := o.PeerConfigs()
	if err != nil {
		return HierarchyConfig{}, fmt.Errorf("--peer: %w", err)
	}
	out := HierarchyConfig{Name: o.CacheName, FreshnessWait: o.FreshnessWait, AdoptShards: o.AdoptShards}
	for _, p := range peers {
		out.Peers = append(out.Peers, mirror.Peer{Name: p.Name, Config: p.Config})
	}
	return out, nil
}

// newMirror builds the mirror of a cache with peers; nil without peers.
// It writes its copies through loopback, as system:masters, so that they
// pass the same storage, admission and watch cache as every other write.
func newMirror(c HierarchyConfig, loopback *rest.Config, plane *dataplane.Registry) (*mirror.Mirror, error) {
	if len(c.Peers) == 0 {
		return nil, nil
	}
	return mirror.New(mirror.Config{
		Self:          c.Name,
		Peers:         c.Peers,
		Local:         loopback,
		FreshnessWait: c.FreshnessWait,
		Adopted:       c.AdoptShards,
		Resources: func() []schema.GroupVersionResource {
			var out []schema.GroupVersionResource
			for _, r := range plane.Resources() {
				if len(r.Versions) == 0 {
					continue
				}
				out = append(out, schema.GroupVersionResource{Group: r.Group, Version: r.Versions[0], Resource: r.Resource})
			}
			return out
		},
	})
}

// runMirror is the mirror's loop; a cache without peers has none.
func (s *Server) runMirror(ctx context.Context) {
	if s.mirror != nil {
		s.mirror.Run(ctx)
	}
}

// Mirror is the cache's mirror of its peers; nil without peers.
func (s *Server) Mirror() *mirror.Mirror { return s.mirror }

// A cache in a hierarchy is the home of the shards that push to it, and
// answers its mirrors (and readers checking freshness) its revision of each
// partition's data at kcpcache.RevisionPath. Every server does, named or
// not, peered or not: a peer may start mirroring it at any time, and the
// tracker costs one etcd watch.

// HomeRevisions is the tracker of this cache's revision of each partition
// and type, running from the post-start hook HomeRevisionHookName.
func (s *Server) HomeRevisions() *homerevision.Tracker { return s.homeRevisions }

// serveHomeRevisions serves kcpcache.RevisionPath. The handler chain
// authenticates and authorizes it as a non-resource path (authorization's
// rules: shards, readers and peers may GET it).
func (s *Server) serveHomeRevisions(c CompletedConfig) {
	s.GenericAPIServer.Handler.NonGoRestfulMux.Handle(kcpcache.RevisionPath,
		homerevision.Handler(s.homeRevisions, cacheName(c), s.epoch.Epoch))
}

// cacheName is the cache's name in a hierarchy (--cache-name); "" for a
// cache without one.
func cacheName(c CompletedConfig) string { return c.extra.Hierarchy.Name }
