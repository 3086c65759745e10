package mirror

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/client"
)

// defaultTypeInterval is how often the mirror looks for types this cache
// started serving (a CRD created at runtime) and starts streams for them.
const defaultTypeInterval = 10 * time.Second

// Peer is a cache to mirror.
type Peer struct {
	// Name is the peer's --cache-name: the home its shards' copies name.
	Name string
	// Config reaches the peer, authenticated as kcpcache.PeerUser(self).
	Config *rest.Config
}

// Config is what a Mirror needs.
type Config struct {
	// Self is this cache's name.
	Self string
	// Peers are the caches whose home partitions are mirrored here.
	Peers []Peer
	// Local reaches this cache as system:masters (the loopback client): the
	// mirror writes its copies there, in the partitions they belong to.
	Local *rest.Config
	// Resources returns the types this cache serves; each is mirrored from
	// every peer that serves it too.
	Resources func() []schema.GroupVersionResource
	// FreshnessWait bounds a consistent read's wait for the mirror.
	FreshnessWait time.Duration
	// TypeInterval is how often new types are picked up; zero means ten
	// seconds.
	TypeInterval time.Duration
	// Adopted are shards whose home moves to this cache (moving.go).
	Adopted []string
}

// Mirror pulls the partitions whose home is a peer, and knows how fresh its
// copies are.
type Mirror struct {
	cfg   Config
	local *client.ClusterClient
	peers map[string]*peer

	// homes maps a shard to the cache that is its home, as learnt from the
	// data: a shard seen in a peer's own objects is homed there, a shard
	// that wrote here is homed here.
	homesMu sync.RWMutex
	homes   map[string]string
	// adopted are the shards whose home moved here; no peer is their home.
	adopted map[string]bool
}

// peer is one peer and its streams.
type peer struct {
	name   string
	client *client.ClusterClient
	// http and revisionURL ask the peer for its revision of some data.
	http        *http.Client
	revisionURL string

	mu      sync.Mutex
	streams map[schema.GroupResource]*stream

	// holds are the partitions held after the peer's epoch changed.
	holds *holds
	// relist is closed and replaced to make every stream of the peer list
	// again (a shard's home moved to the peer: see moving.go).
	relist chan struct{}
}

// New builds a Mirror; Run starts it.
func New(cfg Config) (*Mirror, error) {
	if err := kcpcache.ValidateCacheName(cfg.Self); err != nil {
		return nil, err
	}
	if cfg.Local == nil || cfg.Resources == nil {
		return nil, errors.New("mirror: a local client config and the served resources are required")
	}
	if cfg.FreshnessWait <= 0 {
		return nil, errors.New("mirror: the freshness wait must be positive")
	}
	if cfg.TypeInterval == 0 {
		cfg.TypeInterval = defaultTypeInterval
	}
	// The mirror's writes are this server's own work, not a client's:
	// no client-side rate (the loopback's would pace a large first sync).
	localConfig := rest.CopyConfig(cfg.Local)
	localConfig.QPS, localConfig.Burst, localConfig.RateLimiter = -1, 0, nil
	local, err := client.NewForConfig(localConfig)
	if err != nil {
		return nil, err
	}
	m := &Mirror{cfg: cfg, local: local, peers: map[string]*peer{}, homes: map[string]string{}, adopted: map[string]bool{}}
	for _, s := range cfg.Adopted {
		m.adopted[s] = true
		m.homes[s] = cfg.Self
	}
	for _, p := range cfg.Peers {
		if p.Name == cfg.Self {
			return nil, fmt.Errorf("mirror: peer %q is this cache", p.Name)
		}
		if _, dup := m.peers[p.Name]; dup {
			return nil, fmt.Errorf("mirror: peer %q given twice", p.Name)
		}
		// A kubeconfig cannot set a rate, and client-go's default (5
		// requests a second) would make a mirror of some twenty types wait
		// seconds to list and watch them after every start or outage. The
		// mirror's requests are few and bounded (a list and a watch per
		// type, a revision check per consistent read); the peer's own
		// in-flight limits protect it.
		cfg := rest.CopyConfig(p.Config)
		cfg.QPS, cfg.Burst, cfg.RateLimiter = -1, 0, nil
		c, err := client.NewForConfig(cfg)
		if err != nil {
			return nil, fmt.Errorf("mirror: peer %q: %w", p.Name, err)
		}
		hc, err := rest.HTTPClientFor(cfg)
		if err != nil {
			return nil, fmt.Errorf("mirror: peer %q: %w", p.Name, err)
		}
		m.peers[p.Name] = &peer{
			name: p.Name, client: c, http: hc,
			revisionURL: p.Config.Host + kcpcache.RevisionPath,
			streams:     map[schema.GroupResource]*stream{},
			holds:       newHolds(),
			relist:      make(chan struct{}),
		}
	}
	return m, nil
}

// Run mirrors until ctx ends, and returns once every stream has stopped.
func (m *Mirror) Run(ctx context.Context) {
	logger := klog.FromContext(ctx).WithName("mirror")
	ctx = klog.NewContext(ctx, logger)
	var wg sync.WaitGroup
	defer wg.Wait()
	for _, p := range m.peers {
		wg.Go(func() { p.releaseLoop(ctx) })
	}
	ticker := time.NewTicker(m.cfg.TypeInterval)
	defer ticker.Stop()
	for {
		for _, gvr := range m.cfg.Resources() {
			for _, p := range m.peers {
				if s, added := p.addStream(gvr, m); added {
					logger.V(2).Info("Mirroring a type", "peer", p.name, "resource", gvr.GroupResource().String())
					wg.Go(func() { s.run(ctx) })
				}
			}
		}
		m.reportAges()
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// reportAges sets kcp_cache_mirror_confirmed_age_seconds of every stream.
func (m *Mirror) reportAges() {
	for _, p := range m.peers {
		p.mu.Lock()
		for gr, s := range p.streams {
			if _, _, at := s.state(); !at.IsZero() {
				confirmedAge.WithLabelValues(p.name, gr.String()).Set(time.Since(at).Seconds())
			}
		}
		p.mu.Unlock()
	}
}

// addStream returns the stream of gvr, and whether it is new.
func (p *peer) addStream(gvr schema.GroupVersionResource, m *Mirror) (*stream, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if s, ok := p.streams[gvr.GroupResource()]; ok {
		return s, false
	}
	s := newStream(m, p, gvr)
	p.streams[gvr.GroupResource()] = s
	return s, true
}

// stream returns the stream of gr, nil if there is none.
func (p *peer) stream(gr schema.GroupResource) *stream {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.streams[gr]
}

// HomeOf returns the cache that is shard's home, as far as this cache knows.
func (m *Mirror) HomeOf(shard string) (string, bool) {
	m.homesMu.RLock()
	defer m.homesMu.RUnlock()
	h, ok := m.homes[shard]
	return h, ok
}

// setHome records that home is shard's home. A change of home is logged:
// it is either a hand-over or two caches that both receive the shard.
func (m *Mirror) setHome(ctx context.Context, shard, home string) {
	if m.adopted[shard] && home != m.cfg.Self {
		return
	}
	m.homesMu.RLock()
	old, ok := m.homes[shard]
	m.homesMu.RUnlock()
	if ok && old == home {
		return
	}
	m.homesMu.Lock()
	m.homes[shard] = home
	m.homesMu.Unlock()
	if ok {
		klog.FromContext(ctx).Info("A shard's home changed", "shard", shard, "from", old, "to", home)
	}
	homeInfo.WithLabelValues(shard, home).Set(1)
	if ok {
		homeInfo.DeleteLabelValues(shard, old)
	}
	if ok && old == m.cfg.Self {
		// The shard moved from here to a peer: list that peer again, so
		// that the objects the shard wrote here are replaced by the new
		// home's (moving.go).
		if p, isPeer := m.peers[home]; isPeer {
			p.requestRelist()
		}
	}
}

// setHomeIfUnknown records home as shard's home unless another is known:
// what local objects suggest yields to what peers say.
func (m *Mirror) setHomeIfUnknown(ctx context.Context, shard, home string) {
	if _, ok := m.HomeOf(shard); !ok {
		m.setHome(ctx, shard, home)
	}
}

// RecordLocalWrite records that shard wrote here: this cache is its home.
func (m *Mirror) RecordLocalWrite(ctx context.Context, shard string) {
	m.setHome(ctx, shard, m.cfg.Self)
}
