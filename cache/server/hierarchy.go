package server

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"

	"github.com/kcp-cache/kcp-cache/cache/options"
	"github.com/kcp-cache/kcp-cache/cache/server/dataplane"
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
	out := HierarchyConfig{Name: o.CacheName, FreshnessWait: o.FreshnessWait}
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
