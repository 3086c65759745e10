package mirror

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/client"
	"github.com/kcp-cache/kcp-cache/cache/server/homes"
)

// defaultTypeInterval is how often the mirror looks for types this cache
// started serving (a CRD created at runtime) and starts streams for them.
const defaultTypeInterval = 10 * time.Second

// Config is what a Mirror needs.
type Config struct {
	// CacheName is this cache's name (--cache-name).
	CacheName string
	// Peers are the caches whose home partitions are mirrored here.
	Peers []*homes.Peer
	// Local reaches this cache as system:masters (the loopback client): the
	// mirror writes its copies there, in the partitions they belong to.
	Local *rest.Config
	// Writes reaches this cache as Local does, for the creates and updates
	// of copies only (short answers); nil: through Local.
	Writes *rest.Config
	// Resources returns the types this cache serves; each is mirrored from
	// every peer that serves it too.
	Resources func() []schema.GroupVersionResource
	// FreshnessWait (--freshness-wait) bounds a consistent read's wait for
	// the mirror.
	FreshnessWait time.Duration
	// TypeInterval is how often new types are picked up; zero means ten
	// seconds.
	TypeInterval time.Duration
	// Homes is the cache's table of home claims and routes: a peer's
	// objects of a shard are mirrored only when the shard's home is the
	// peer, or a home this cache's route to goes through the peer.
	Homes *homes.Table
	// StorageRevision reads the local storage's revision, and
	// PartitionRevision the local revision of the last change to a shard's
	// objects of a type (the wildcard: any shard's) after a barrier, as
	// homerevision.Tracker.Revision does: for the answers this cache gives
	// as a relay (relay.go); nil: it relays nothing.
	StorageRevision   StorageRevision
	PartitionRevision PartitionRevision
	// Epoch is this cache's current epoch, named in its relayed answers.
	Epoch func() string
}

// LocalRevisions tells this cache's revision of the last change of shard's
// data of gr (the wildcard: of any shard's), covering every write
// acknowledged before the call (homerevision.Tracker).
type LocalRevisions interface {
	Revision(ctx context.Context, shard string, gr schema.GroupResource) (int64, error)
}

// Mirror pulls the partitions whose home is a peer, and knows how fresh its
// copies are.
type Mirror struct {
	cfg   Config
	local *client.ClusterClient
	// writer sends the copies' creates and updates (copywriter.go).
	writer *copyWriter
	peers  map[string]*source
	homes  *homes.Table

	// stateVersion counts the changes of every stream's state (what the
	// home-revision header is made from); localRev caches a local
	// revision that covers every write applied up to a state (header.go).
	stateVersion atomic.Int64
	localRevMu   sync.Mutex
	localRevAt   int64
	localRev     int64

	// scanNow makes Run look for new types at once (a consistent read of
	// a type that has no stream yet); streamsAdded is closed and replaced
	// whenever a stream is added.
	scanNow        chan struct{}
	streamsAddedMu sync.Mutex
	streamsAdded   chan struct{}
}

// source is a peer as the mirror pulls from it: the peer, and what the
// mirror keeps of it (its streams, the partitions held after its epoch
// changed, its lag series, its requests to list again).
type source struct {
	*homes.Peer

	mu      sync.Mutex
	streams map[schema.GroupResource]*stream

	// holds are the partitions held after the peer's epoch changed.
	holds *holds

	// lagSeries and behindSince are the partition lag series set and when
	// each partition was first seen behind (reportLag's own).
	lagSeries   map[lagKey]bool
	behindSince map[lagKey]time.Time
	// relist is closed and replaced to make every stream of the peer list
	// again (a shard's home moved to the peer: see moving.go);
	// listRequests counts those requests.
	relist       chan struct{}
	listRequests int64
}

// New builds a Mirror; Run starts it.
func New(cfg Config) (*Mirror, error) {
	registerMetrics()
	if err := kcpcache.ValidateCacheName(cfg.CacheName); err != nil {
		return nil, err
	}
	if cfg.Local == nil || cfg.Resources == nil || cfg.Homes == nil {
		return nil, errors.New("mirror: a local client config and the served resources and the home claims are required")
	}
	if cfg.FreshnessWait <= 0 {
		return nil, errors.New("mirror: the freshness wait must be positive")
	}
	if cfg.TypeInterval == 0 {
		cfg.TypeInterval = defaultTypeInterval
	}
	if cfg.Epoch == nil {
		cfg.Epoch = func() string { return "" }
	}
	// The mirror's writes are this server's own work, not a client's:
	// no client-side rate (the loopback's would pace a large first sync).
	local, err := client.NewForConfig(client.Unthrottled(cfg.Local))
	if err != nil {
		return nil, err
	}
	writes := cfg.Writes
	if writes == nil {
		writes = cfg.Local
	}
	writer, err := newCopyWriter(client.Unthrottled(writes))
	if err != nil {
		return nil, err
	}
	m := &Mirror{cfg: cfg, local: local, writer: writer, peers: map[string]*source{}, homes: cfg.Homes, scanNow: make(chan struct{}, 1), streamsAdded: make(chan struct{})}
	for _, p := range cfg.Peers {
		if p.Name == cfg.CacheName {
			return nil, fmt.Errorf("mirror: peer %q is this cache", p.Name)
		}
		if _, dup := m.peers[p.Name]; dup {
			return nil, fmt.Errorf("mirror: peer %q given twice", p.Name)
		}
		m.peers[p.Name] = &source{
			Peer:        p,
			behindSince: map[lagKey]time.Time{},
			streams:     map[schema.GroupResource]*stream{},
			holds:       newHolds(),
			relist:      make(chan struct{}),
		}
	}
	for name := range m.peers {
		// Exported from the start, not only after a first hold or restart.
		heldPartitions.WithLabelValues(name).Set(0)
		streamRestarts.WithLabelValues(name)
	}
	m.homes.OnHomeChange(m.homeChanged)
	m.homes.OnRouteChange(m.routeChanged)
	m.homes.SetRouteEpochs(m.homeEpoch)
	return m, nil
}

// Run mirrors until ctx ends, and returns once every stream has stopped.
func (m *Mirror) Run(ctx context.Context) {
	logger := klog.FromContext(ctx).WithName("mirror")
	ctx = klog.NewContext(ctx, logger)
	var wg sync.WaitGroup
	defer wg.Wait()
	for _, p := range m.peers {
		wg.Go(func() { p.releaseLoop(ctx, m.local) })
	}
	wg.Go(func() { m.promoteLoop(ctx) })
	ticker := time.NewTicker(m.cfg.TypeInterval)
	defer ticker.Stop()
	for {
		for _, gvr := range m.cfg.Resources() {
			for _, p := range m.peers {
				if !m.homes.PeerPassesOn(p.Name, gvr.GroupResource().String()) {
					// The peer passes on only some resources to this cache
					// (--pass-on there), not this one: nothing to stream.
					continue
				}
				if s, added := p.addStream(gvr, m); added {
					logger.V(2).Info("Mirroring a type", "peer", p.Name, "resource", gvr.GroupResource().String())
					wg.Go(func() { s.run(ctx) })
					m.streamAdded()
				}
			}
		}
		m.reportAges()
		for _, p := range m.peers {
			p.reportLag(ctx, m)
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		case <-m.scanNow:
		}
	}
}

// serves reports whether this cache serves gr, or an identity of it
// (streamsFor).
func (m *Mirror) serves(gr schema.GroupResource) bool {
	for _, gvr := range m.cfg.Resources() {
		served := gvr.GroupResource()
		if served == gr || served.Group == gr.Group && !strings.Contains(gr.Resource, ":") && strings.HasPrefix(served.Resource, gr.Resource+":") {
			return true
		}
	}
	return false
}

// streamAdded wakes the reads waiting for a stream (awaitStreams).
func (m *Mirror) streamAdded() {
	m.streamsAddedMu.Lock()
	defer m.streamsAddedMu.Unlock()
	close(m.streamsAdded)
	m.streamsAdded = make(chan struct{})
}

// awaitStreams returns the streams of p a read of gr covers, asking Run to
// look for new types at once when there are none yet (a type created at
// the home moments ago), until ctx ends: then none.
func (m *Mirror) awaitStreams(ctx context.Context, p *source, gr schema.GroupResource) []coveredStream {
	if !m.serves(gr) {
		return nil
	}
	select {
	case m.scanNow <- struct{}{}:
	default:
	}
	for {
		m.streamsAddedMu.Lock()
		added := m.streamsAdded
		m.streamsAddedMu.Unlock()
		if covered := p.streamsFor(gr); len(covered) > 0 {
			return covered
		}
		select {
		case <-added:
		case <-ctx.Done():
			return nil
		}
	}
}

// reportAges sets kcp_cache_mirror_confirmed_age_seconds of every stream.
func (m *Mirror) reportAges() {
	for _, p := range m.peers {
		p.mu.Lock()
		for gr, s := range p.streams {
			if _, _, at := s.state(); !at.IsZero() {
				confirmedAge.WithLabelValues(p.Name, gr.String()).Set(time.Since(at).Seconds())
			}
		}
		p.mu.Unlock()
	}
}

// addStream returns the stream of gvr, and whether it is new.
func (p *source) addStream(gvr schema.GroupVersionResource, m *Mirror) (*stream, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if s, ok := p.streams[gvr.GroupResource()]; ok {
		return s, false
	}
	s := newStream(m, p, gvr)
	p.streams[gvr.GroupResource()] = s
	return s, true
}

// coveredStream is a stored type a read covers, and its stream.
type coveredStream struct {
	gr schema.GroupResource
	s  *stream
}

// streamsFor returns the streams a read of gr at p covers: gr's own; or,
// when there is none and gr names a resource without identity, the stream
// of every identity of it ("<resource>:<identity>" in gr's group), which a
// CachedResource's publication reads at once; none if there are neither.
func (p *source) streamsFor(gr schema.GroupResource) []coveredStream {
	p.mu.Lock()
	defer p.mu.Unlock()
	if s, ok := p.streams[gr]; ok {
		return []coveredStream{{gr: gr, s: s}}
	}
	if strings.Contains(gr.Resource, ":") {
		return nil
	}
	var out []coveredStream
	for sgr, s := range p.streams {
		if sgr.Group == gr.Group && strings.HasPrefix(sgr.Resource, gr.Resource+":") {
			out = append(out, coveredStream{gr: sgr, s: s})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].gr.Resource < out[j].gr.Resource })
	return out
}

// homeOf returns the peer holding shard's claim, or nil; and whether the
// shard's claim may be followed at all (known, no conflict).
func (m *Mirror) homeOf(shard string) (home string, ok bool) {
	c, conflict, known := m.homes.Lookup(shard)
	if !known || conflict != "" {
		return "", false
	}
	return c.Home, true
}

// homeChanged is told by the claims when a shard's home changed: when it
// moved to a peer, every stream of that peer lists again, so that the
// peer's objects of the shard are taken up (and, when the shard moved away
// from here, this cache's own objects of it replaced: moving.go).
func (m *Mirror) homeChanged(ctx context.Context, shard, from, to string) {
	// A first claim needs no list: a stream asks for the claim of a shard
	// it meets before taking its objects. A list would count every
	// partition as changed at its revision, and make readers who saw this
	// cache refuse a mirror that did not list.
	if from == "" {
		return
	}
	if p := m.sourceFor(to); p != nil {
		klog.FromContext(ctx).V(2).Info("A shard's home moved: listing the peer it comes through again", "shard", shard, "from", from, "to", to, "peer", p.Name)
		p.requestRelist()
	}
}

// routeChanged is told by the table when a home's partitions are to be
// taken from another peer: that peer's streams list again, confirming the
// home through it first (relay.go); the former peer's streams stop taking
// them, and delete nothing of them. A home that is itself a peer was taken
// from it before any route was known: its first route changes nothing.
func (m *Mirror) routeChanged(ctx context.Context, home, from, to string) {
	if from == "" && to == home {
		return
	}
	if p, ok := m.peers[to]; ok {
		klog.FromContext(ctx).Info("Listing a peer again to take a home's partitions through it", "home", home, "from", from, "peer", to)
		p.requestRelist()
	}
}

// homeEpoch is the epoch of home that this cache's copies of its
// partitions came from, as the streams of its peer know it ("" when
// unknown): the epoch of the routes this cache offers onward.
func (m *Mirror) homeEpoch(home string) string {
	via, _, ok := m.homes.Via(home)
	p := m.peers[via]
	if !ok || p == nil {
		return ""
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range p.streams {
		if home == p.Name {
			if _, epoch, _ := s.state(); epoch != "" {
				return epoch
			}
			continue
		}
		if epoch, _, _, _ := s.relayView(home, kcpcache.Wildcard); epoch != "" {
			return epoch
		}
	}
	return ""
}
