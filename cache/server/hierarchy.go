package server

import (
	"context"
	"fmt"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/server/dataplane"
	"github.com/kcp-cache/kcp-cache/cache/server/homerevision"
	"github.com/kcp-cache/kcp-cache/cache/server/homes"
	"github.com/kcp-cache/kcp-cache/cache/server/mirror"
)

// MirrorHookName mirrors the partitions whose home is a peer cache.
const MirrorHookName = "kcp-cache-mirror"

// newMirror builds the mirror of a cache with peers; nil without peers.
// It writes its copies as the loopback client, as system:masters, so that
// they pass the same filters, storage, admission and watch cache as every
// other write: through the server's handler chain in-process (writes), and
// its other requests over loopback.
func newMirror(c HierarchyConfig, claims *homes.Table, loopback, writes *rest.Config, plane *dataplane.Registry, current mirror.StorageRevision, partition mirror.PartitionRevision, epoch func() string) (*mirror.Mirror, error) {
	if len(c.Peers) == 0 {
		return nil, nil
	}
	return mirror.New(mirror.Config{
		CacheName:         c.CacheName,
		Peers:             c.Peers,
		Local:             loopback,
		Writes:            writes,
		FreshnessWait:     c.FreshnessWait,
		Homes:             claims,
		StorageRevision:   current,
		PartitionRevision: partition,
		Epoch:             epoch,
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

// newHomes builds and loads the table of home claims of a named cache; nil
// for a cache without a name (it is in no hierarchy). The claims persist in
// the cache's etcd, next to its epoch marker, so that a restart keeps them.
func newHomes(ctx context.Context, c HierarchyConfig, etcdClient *clientv3.Client, prefix string, epoch func() string) (*homes.Table, error) {
	if c.CacheName == "" {
		return nil, nil
	}
	cfg := homes.Config{CacheName: c.CacheName, Epoch: epoch, Peers: c.Peers, FreshnessWait: c.FreshnessWait, Adopt: c.AdoptShards, PassOn: c.PassOn}
	if etcdClient != nil {
		cfg.Store = etcdClaimStore{client: etcdClient, key: homes.StorageKey(prefix)}
	}
	h, err := homes.New(cfg)
	if err != nil {
		return nil, err
	}
	if err := h.Load(ctx); err != nil {
		return nil, err
	}
	return h, nil
}

// etcdClaimStore keeps the claims in one etcd key.
type etcdClaimStore struct {
	client *clientv3.Client
	key    string
}

func (s etcdClaimStore) Load(ctx context.Context) ([]byte, error) {
	resp, err := s.client.Get(ctx, s.key)
	if err != nil {
		return nil, fmt.Errorf("reading the home claims: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return nil, nil
	}
	return resp.Kvs[0].Value, nil
}

func (s etcdClaimStore) Save(ctx context.Context, data []byte) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err := s.client.Put(ctx, s.key, string(data))
	return err
}

// A cache in a hierarchy is the home of the shards that push to it, and
// answers its mirrors (and readers checking freshness) its revision of each
// partition's data at kcpcache.RevisionPath. Every server does, named or
// not, peered or not: a peer may start mirroring it at any time, and the
// tracker costs one etcd watch.

// storageRevision reads the local etcd's current revision (a count-only read
// of the claims' key); nil without a client.
func storageRevision(etcdClient *clientv3.Client, prefix string) mirror.StorageRevision {
	if etcdClient == nil {
		return nil
	}
	key := homes.StorageKey(prefix)
	return func(ctx context.Context) (int64, error) {
		resp, err := etcdClient.Get(ctx, key, clientv3.WithCountOnly())
		if err != nil {
			return 0, err
		}
		return resp.Header.Revision, nil
	}
}

// runMirror runs the claims' loop (adoption, the peers' tables) and the
// mirror's; a cache without a name has neither, one without peers no mirror.
func (s *Server) runMirror(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	if s.homes != nil {
		wg.Go(func() { s.homes.Run(ctx) })
	}
	if s.mirror != nil {
		s.mirror.Run(ctx)
	}
}

// Mirror is the cache's mirror of its peers; nil without peers.
func (s *Server) Mirror() *mirror.Mirror { return s.mirror }

// HomeRevisions is the tracker of this cache's revision of each partition
// and type, running from the post-start hook HomeRevisionHookName.
func (s *Server) HomeRevisions() *homerevision.Tracker { return s.homeRevisions }

// serveHomeRevisions serves kcpcache.RevisionPath. The handler chain
// authenticates and authorizes it as a non-resource path (authorization's
// rules: shards, readers and peers may GET it).
func (s *Server) serveHomeRevisions(c CompletedConfig) {
	var elsewhere func(string) (string, int64, bool)
	if s.homes != nil {
		elsewhere = s.homes.HomedElsewhere
	}
	var relay homerevision.Relay
	if s.mirror != nil {
		relay = s.mirror
	}
	s.GenericAPIServer.Handler.NonGoRestfulMux.Handle(kcpcache.RevisionPath,
		homerevision.Handler(s.homeRevisions, c.extra.Hierarchy.CacheName, s.epoch.Epoch, elsewhere, relay))
	s.GenericAPIServer.Handler.NonGoRestfulMux.Handle(kcpcache.RevisionsPath,
		homerevision.RevisionsHandler(s.homeRevisions, c.extra.Hierarchy.CacheName, s.epoch.Epoch))
	if s.homes != nil {
		s.GenericAPIServer.Handler.NonGoRestfulMux.Handle(kcpcache.HomesPath, s.homes.Handler())
	}
}
