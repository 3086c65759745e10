package main

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/options"
	"github.com/kcp-cache/kcp-cache/cache/server"
	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
	inprocess "github.com/kcp-cache/kcp-cache/examples/internal/run"
)

// The two caches of the regions phase: the home, where the shards write,
// and the mirror, which pulls the home's partitions.
const (
	homeCache   = "a"
	mirrorCache = "b"
)

// regionsScope is the partition whose writes the propagation and read
// measurements follow; its shard writes at the home.
var regionsScope = kcpcache.Scope{Shard: "shard-at-a", Cluster: "root"}

// regionsSyncTimeout bounds each wait for the mirror (a whole initial
// sync of the memory data set included).
const regionsSyncTimeout = 3 * time.Minute

// regionCache is one cache of the regions phase, started like the bench's
// own server (examples/internal/run: etcd with fsync) with a name, a static
// token for its peer, and optionally the peer to mirror.
type regionCache struct {
	name      string
	dir       string
	tokenFile string
	srv       *cachetest.Server
	admin     *http.Client
	// passOn are the cache's --pass-on values from its next (re)start on.
	passOn []string
}

// regionPeerToken is the bearer token with which cache from reads cache to.
func regionPeerToken(from, to string) string { return "bench-peer-" + from + "-reads-" + to }

// startRegion starts cache name under dir; the caches that read it
// (readers, its peers) authenticate with static tokens as
// kcpcache.PeerUser(reader). peers are --peer values (NAME=KUBECONFIG),
// none for a cache that does not mirror.
func (b *bench) startRegion(ctx context.Context, dir, name string, readers, peers []string) (*regionCache, error) {
	return b.startRegionWith(ctx, dir, name, readers, peers, nil)
}

// startRegionWith is startRegion for a cache with --pass-on values.
func (b *bench) startRegionWith(ctx context.Context, dir, name string, readers, peers, passOn []string) (*regionCache, error) {
	r := &regionCache{name: name, dir: dir, tokenFile: filepath.Join(dir, "tokens.csv"), passOn: passOn}
	var lines strings.Builder
	for _, reader := range readers {
		fmt.Fprintf(&lines, "%s,%s,%s\n", regionPeerToken(reader, name), kcpcache.PeerUser(reader), reader)
	}
	if err := os.WriteFile(r.tokenFile, []byte(lines.String()), 0o600); err != nil {
		return nil, err
	}
	srv, err := inprocess.Cache(ctx, dir, 0, r.flags(b.cfg.serverFlags, peers))
	if err != nil {
		return nil, fmt.Errorf("starting cache %s: %w", name, err)
	}
	r.srv = srv
	if r.admin, err = rest.HTTPClientFor(srv.Config()); err != nil {
		_ = srv.Stop()
		return nil, err
	}
	return r, nil
}

// flags are the cache's options: the bench's -server-flag values, then its
// place in the hierarchy (production's freshness wait, the default).
func (r *regionCache) flags(serverFlags []string, peers []string) func(*options.Options) {
	passOn := r.passOn
	return func(o *options.Options) {
		// Checked when the bench started (startServer).
		_ = applyServerFlags(o, serverFlags)
		o.Authentication.TokenAuthFile = r.tokenFile
		o.Hierarchy.CacheName = r.name
		o.Hierarchy.Peers = peers
		o.Hierarchy.PassOn = passOn
	}
}

// restart restarts the cache's server on the same etcd with peers.
func (r *regionCache) restart(ctx context.Context, serverFlags, peers []string) error {
	r.admin.CloseIdleConnections()
	return r.srv.Restart(ctx, func(o *cachetest.Options) { o.Flags = r.flags(serverFlags, peers) })
}

// peerFlag writes a kubeconfig with which cache from reads r, and returns
// the --peer value of from for r.
func (r *regionCache) peerFlag(from string) (string, error) {
	cfg := rest.AnonymousClientConfig(r.srv.Config())
	cfg.BearerToken = regionPeerToken(from, r.name)
	path := filepath.Join(r.dir, from+"-reads-"+r.name+".kubeconfig")
	if err := server.WriteKubeconfig(path, cfg); err != nil {
		return "", err
	}
	return r.name + "=" + path, nil
}

// resource is an admin client of apiexports in scope s at this cache.
func (r *regionCache) resource(s kcpcache.Scope) (dynamic.ResourceInterface, error) {
	return r.resourceOf(s, apiExports)
}

// resourceOf is an admin client of gvr in scope s at this cache.
func (r *regionCache) resourceOf(s kcpcache.Scope, gvr schema.GroupVersionResource) (dynamic.ResourceInterface, error) {
	cfg := r.srv.Config()
	cfg.Host = kcpcache.JoinHostPath(cfg.Host, kcpcache.ScopedPathPrefix(s))
	dc, err := dynamic.NewForConfigAndClient(cfg, r.admin)
	if err != nil {
		return nil, err
	}
	return dc.Resource(gvr), nil
}

// storedCount is how many apiexports this cache's etcd holds.
func (r *regionCache) storedCount(ctx context.Context) (int64, error) {
	return r.storedCountOf(ctx, apiExports)
}

// storedCountOf is how many objects of gvr this cache's etcd holds.
func (r *regionCache) storedCountOf(ctx context.Context, gvr schema.GroupVersionResource) (int64, error) {
	resp, err := r.srv.EtcdClient().Get(ctx, typeKeyPrefix(r.srv.EtcdPrefix(), gvr), clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return 0, err
	}
	return resp.Count, nil
}

// shardWriters hands out clients that write at a cache as a shard
// (system:kcp:shard:<shard>, a client certificate from the CA the cache
// trusts), one HTTP client per shard, as each shard has its own.
type shardWriters struct {
	srv     *cachetest.Server
	mu      sync.Mutex
	clients map[string]*http.Client
}

func (w *shardWriters) resource(s kcpcache.Scope) (dynamic.ResourceInterface, error) {
	return w.resourceOf(s, apiExports)
}

func (w *shardWriters) resourceOf(s kcpcache.Scope, gvr schema.GroupVersionResource) (dynamic.ResourceInterface, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	cfg := rest.AnonymousClientConfig(w.srv.Config())
	hc, ok := w.clients[s.Shard]
	if !ok {
		certPEM, keyPEM, err := w.srv.ClientCA().IssueClient(kcpcache.ShardUser(s.Shard), nil)
		if err != nil {
			return nil, err
		}
		cfg.CertData, cfg.KeyData = certPEM, keyPEM
		if hc, err = rest.HTTPClientFor(cfg); err != nil {
			return nil, err
		}
		w.clients[s.Shard] = hc
	}
	cfg.Host = kcpcache.JoinHostPath(cfg.Host, kcpcache.ScopedPathPrefix(s))
	dc, err := dynamic.NewForConfigAndClient(cfg, hc)
	if err != nil {
		return nil, err
	}
	return dc.Resource(gvr), nil
}

// regions measures a hierarchy of two caches in this process: a home (a),
// where shards write, and a mirror (b) that peers with it (and a with b):
// the memory a mirrored copy costs against the home's copy, the lag from a
// shard's write at the home to the object's appearance at the mirror
// against its appearance at the home, and a consistent GET at the mirror
// (which asks the home for its revision and waits for the mirror) against
// a consistent GET at the home and a resourceVersion=0 GET at the mirror.
func (b *bench) regions(ctx context.Context) error {
	dir, err := os.MkdirTemp("", "kcp-cache-bench-regions-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	for _, name := range []string{homeCache, mirrorCache} {
		if err := os.Mkdir(filepath.Join(dir, name), 0o700); err != nil {
			return err
		}
	}

	// b first, without peers: a's --peer needs b's serving certificate.
	// b peers with a only after a holds the memory data set.
	progress("regions: starting cache %s (the mirror, not yet peering) and cache %s (the home, peering with %s)", mirrorCache, homeCache, mirrorCache)
	mirror, err := b.startRegion(ctx, filepath.Join(dir, mirrorCache), mirrorCache, []string{homeCache}, nil)
	if err != nil {
		return err
	}
	defer func() { _ = mirror.srv.Stop() }()
	homePeer, err := mirror.peerFlag(homeCache)
	if err != nil {
		return err
	}
	home, err := b.startRegion(ctx, filepath.Join(dir, homeCache), homeCache, []string{mirrorCache}, []string{homePeer})
	if err != nil {
		return err
	}
	defer func() { _ = home.srv.Stop() }()
	mirrorPeer, err := home.peerFlag(mirrorCache)
	if err != nil {
		return err
	}
	peering, notPeering := []string{mirrorPeer}, []string(nil)
	writers := &shardWriters{srv: home.srv, clients: map[string]*http.Client{}}

	mem, err := b.regionsMemory(ctx, home, mirror, writers, peering, notPeering)
	if err != nil {
		return err
	}
	lag, err := b.regionsPropagation(ctx, home, mirror, writers)
	if err != nil {
		return err
	}
	reads, err := b.regionsReads(ctx, home, mirror)
	if err != nil {
		return err
	}
	b.regionsRows(mem, lag, reads)
	return nil
}

// regionsMemoryResult is the memory part of the regions phase.
type regionsMemoryResult struct {
	objects int
	// Snapshots: before the load, after the load at the home (the mirror
	// not peering), after the mirror copied every object.
	before, loaded, mirrored memSnapshot
	// The control: the mirror restarted with its peer while the home held
	// none of the data set, against the mirror without peers just before.
	controlBefore, controlAfter memSnapshot
	loadTime                    time.Duration
	// restartTime is the mirror's restart with its peer, until ready;
	// syncTime from then until it held every copy.
	restartTime, syncTime time.Duration
}

// regionsMemory loads the memory data set at the home while the mirror
// does not peer, then lets the mirror peer and copy it, snapshotting the
// process's memory (after GC) before, between and after.
//
// The mirror starts peering through a restart of its server (same etcd,
// same address), which replaces its empty watch caches and adds the mirror's
// streams; the control measures what that restart adds by itself, with the
// home holding none of the data set, so that it can be told apart from the
// copies.
func (b *bench) regionsMemory(ctx context.Context, home, mirror *regionCache, writers *shardWriters, peering, notPeering []string) (regionsMemoryResult, error) {
	res := regionsMemoryResult{objects: b.cfg.regionsMemoryObjects}
	var err error
	progress("regions: control: restarting %s with its peer while %s holds nothing", mirror.name, home.name)
	if res.controlBefore, err = takeMemSnapshot(); err != nil {
		return res, err
	}
	if err := mirror.restart(ctx, b.cfg.serverFlags, peering); err != nil {
		return res, err
	}
	if err := b.waitMirrored(ctx, mirror, 0); err != nil {
		return res, err
	}
	if res.controlAfter, err = takeMemSnapshot(); err != nil {
		return res, err
	}
	if err := mirror.restart(ctx, b.cfg.serverFlags, notPeering); err != nil {
		return res, err
	}

	n := res.objects
	if res.before, err = takeMemSnapshot(); err != nil {
		return res, err
	}
	progress("regions: loading %d objects at %s as their shards, %d concurrent, %s not peering", n, home.name, b.cfg.loadConcurrency, mirror.name)
	if res.loadTime, err = b.createAt(ctx, writers, "export", n, b.cfg.loadConcurrency); err != nil {
		return res, err
	}
	if res.loaded, err = takeMemSnapshot(); err != nil {
		return res, err
	}
	progress("regions: restarting %s with its peer %s; waiting for its %d copies", mirror.name, home.name, n)
	start := time.Now()
	if err := mirror.restart(ctx, b.cfg.serverFlags, peering); err != nil {
		return res, err
	}
	res.restartTime = time.Since(start)
	if err := b.waitMirrored(ctx, mirror, n); err != nil {
		return res, err
	}
	res.syncTime = time.Since(start) - res.restartTime
	progress("regions: %s restarted in %s and held the %d copies %s later", mirror.name, res.restartTime.Round(time.Millisecond), n, res.syncTime.Round(time.Millisecond))
	if res.mirrored, err = takeMemSnapshot(); err != nil {
		return res, err
	}
	return res, nil
}

// createAt creates objects prefix-00000 .. prefix-(n-1) of the data set in
// their partitions through writers, conc at a time.
func (b *bench) createAt(ctx context.Context, writers *shardWriters, prefix string, n, conc int) (time.Duration, error) {
	return b.createTypedAt(ctx, writers, apiExports, "APIExport", prefix, n, conc)
}

// createTypedAt is createAt for objects of gvr, of kind: the data set's
// objects with that type's apiVersion and kind.
func (b *bench) createTypedAt(ctx context.Context, writers *shardWriters, gvr schema.GroupVersionResource, kind, prefix string, n, conc int) (time.Duration, error) {
	var next atomic.Int64
	start := time.Now()
	err := parallel(conc, func() error {
		for {
			i := int(next.Add(1)) - 1
			if i >= n {
				return nil
			}
			s := b.l.scopeOf(i)
			r, err := writers.resourceOf(s, gvr)
			if err != nil {
				return err
			}
			obj, err := b.object(objectName(prefix, i))
			if err != nil {
				return err
			}
			obj.SetAPIVersion(gvr.GroupVersion().String())
			obj.SetKind(kind)
			if _, err := r.Create(ctx, obj, createOptions); err != nil {
				return fmt.Errorf("creating %s in %s: %w", obj.GetName(), s, err)
			}
		}
	})
	return time.Since(start), err
}

// waitMirrored waits until the mirror's etcd holds want apiexports and a
// consistent "*/*" LIST at the mirror (confirmed with the home, and served
// once the mirror's watch cache has them) returns want objects.
func (b *bench) waitMirrored(ctx context.Context, mirror *regionCache, want int) error {
	all, err := mirror.resource(everything)
	if err != nil {
		return err
	}
	last := "not checked"
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, regionsSyncTimeout, true, func(ctx context.Context) (bool, error) {
		stored, err := mirror.storedCount(ctx)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		if stored != int64(want) {
			last = fmt.Sprintf("%d of %d copies stored", stored, want)
			return false, nil
		}
		l, err := all.List(ctx, listConsistent)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		if len(l.Items) != want {
			last = fmt.Sprintf("a consistent LIST returns %d of %d copies", len(l.Items), want)
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for cache %s to mirror %d objects (last: %s): %w", mirror.name, want, last, err)
	}
	return nil
}

// sightings records when a watcher first saw each object.
type sightings struct {
	mu sync.Mutex
	at map[string]time.Time
}

func (s *sightings) seen(name string) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.at[name]
	return t, ok
}

func (s *sightings) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.at)
}

// watchSightings watches r from resourceVersion=0 (served from the cache's
// own copy at both caches, no freshness check) and records the arrival of
// each object's first event. The watch ends with ctx; errc receives why it
// ended early.
func watchSightings(ctx context.Context, r dynamic.ResourceInterface) (*sightings, <-chan error, error) {
	w, err := r.Watch(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		return nil, nil, err
	}
	s := &sightings{at: map[string]time.Time{}}
	errc := make(chan error, 1)
	go func() {
		defer w.Stop()
		for ev := range w.ResultChan() {
			now := time.Now()
			switch ev.Type {
			case watch.Added, watch.Modified:
				u, ok := ev.Object.(*unstructured.Unstructured)
				if !ok {
					continue
				}
				s.mu.Lock()
				if _, dup := s.at[u.GetName()]; !dup {
					s.at[u.GetName()] = now
				}
				s.mu.Unlock()
			case watch.Error:
				errc <- fmt.Errorf("watch error: %v", ev.Object)
				return
			}
		}
		if ctx.Err() == nil {
			errc <- fmt.Errorf("the watch ended early")
		}
	}()
	return s, errc, nil
}

// regionsLag is the propagation part of the regions phase.
type regionsLag struct {
	objects  int
	interval time.Duration
	// Write acknowledged → first seen, at the home and at the mirror
	// (zero when seen before the acknowledgement arrived); write sent →
	// first seen at both.
	home, mirror             summary
	homeFromSend, mirrorSend summary
	homeBeforeAck            int
	mirrorBeforeAck          int
	writes                   summary
	// readsDuring are resourceVersion=0 GETs at the mirror, one every
	// regionsReadInterval, of the object created last, while the shard
	// writes: they meet the mirror's streams applying the writes.
	readsDuring summary
}

// regionsReadInterval paces the stale reads during the propagation.
const regionsReadInterval = 5 * time.Millisecond

// regionsPropagation has a shard create objects at the home, one at a
// time at a fixed pace, while one watcher at the home and one at the
// mirror record when each appears.
func (b *bench) regionsPropagation(ctx context.Context, home, mirror *regionCache, writers *shardWriters) (regionsLag, error) {
	res := regionsLag{objects: b.cfg.regionsObjects, interval: b.cfg.regionsInterval}
	writer, err := writers.resource(regionsScope)
	if err != nil {
		return res, err
	}
	watchCtx, stopWatches := context.WithCancel(ctx)
	defer stopWatches()
	var seen [2]*sightings
	var errcs [2]<-chan error
	for i, r := range []*regionCache{home, mirror} {
		rr, err := r.resource(regionsScope)
		if err != nil {
			return res, err
		}
		if seen[i], errcs[i], err = watchSightings(watchCtx, rr); err != nil {
			return res, fmt.Errorf("watching at %s: %w", r.name, err)
		}
	}

	progress("regions: shard %s creates %d objects at %s, one every %s; watchers at %s and %s, a stale reader at %s", regionsScope.Shard, res.objects, home.name, res.interval, home.name, mirror.name, mirror.name)
	atMirror, err := mirror.resource(regionsScope)
	if err != nil {
		return res, err
	}
	var created atomic.Int64
	readerDone := make(chan []time.Duration, 1)
	readCtx, stopReader := context.WithCancel(ctx)
	defer stopReader()
	go func() {
		var samples []time.Duration
		defer func() { readerDone <- samples }()
		pace := time.NewTicker(regionsReadInterval)
		defer pace.Stop()
		for {
			select {
			case <-readCtx.Done():
				return
			case <-pace.C:
			}
			n := created.Load()
			if n == 0 {
				continue
			}
			start := time.Now()
			// A 404 (the copy not there yet) is an answer too.
			if _, err := atMirror.Get(readCtx, objectName("prop", int(n-1)), getFromCache); err != nil && readCtx.Err() != nil {
				return
			}
			samples = append(samples, time.Since(start))
		}
	}()
	sent := make([]time.Time, res.objects)
	acked := make([]time.Time, res.objects)
	var writes []time.Duration
	pace := time.NewTicker(res.interval)
	defer pace.Stop()
	for i := 0; i < res.objects; i++ {
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-pace.C:
		}
		obj, err := b.object(objectName("prop", i))
		if err != nil {
			return res, err
		}
		sent[i] = time.Now()
		if _, err := writer.Create(ctx, obj, createOptions); err != nil {
			return res, fmt.Errorf("creating %s at %s: %w", obj.GetName(), home.name, err)
		}
		acked[i] = time.Now()
		writes = append(writes, acked[i].Sub(sent[i]))
		created.Store(int64(i + 1))
	}
	res.writes = summarize(writes)

	// Bounded: every object must reach both watchers.
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, regionsSyncTimeout, true, func(context.Context) (bool, error) {
		for _, errc := range errcs {
			select {
			case err := <-errc:
				return false, err
			default:
			}
		}
		return seen[0].count() >= res.objects && seen[1].count() >= res.objects, nil
	})
	if err != nil {
		return res, fmt.Errorf("waiting for the watchers (%d at %s, %d at %s of %d): %w", seen[0].count(), home.name, seen[1].count(), mirror.name, res.objects, err)
	}
	stopReader()
	res.readsDuring = summarize(<-readerDone)
	var fromAck, fromSend [2][]time.Duration
	var beforeAck [2]int
	for i := 0; i < res.objects; i++ {
		for w := range seen {
			at, ok := seen[w].seen(objectName("prop", i))
			if !ok {
				return res, fmt.Errorf("watcher %d never saw %s", w, objectName("prop", i))
			}
			d := at.Sub(acked[i])
			if d < 0 {
				beforeAck[w]++
				d = 0
			}
			fromAck[w] = append(fromAck[w], d)
			fromSend[w] = append(fromSend[w], at.Sub(sent[i]))
		}
	}
	res.home, res.mirror = summarize(fromAck[0]), summarize(fromAck[1])
	res.homeFromSend, res.mirrorSend = summarize(fromSend[0]), summarize(fromSend[1])
	res.homeBeforeAck, res.mirrorBeforeAck = beforeAck[0], beforeAck[1]
	return res, nil
}

// regionsReadResult is the read part of the regions phase.
type regionsReadResult struct {
	mirrorConsistent, homeConsistent, mirrorRV0 summary
}

// regionsReads GETs the propagation's objects one after another, each in
// three ways, in rotating order: consistent at the mirror (the freshness
// check: the home's revision, then the wait for the mirror), consistent at
// the home, and resourceVersion=0 at the mirror.
func (b *bench) regionsReads(ctx context.Context, home, mirror *regionCache) (regionsReadResult, error) {
	var res regionsReadResult
	atHome, err := home.resource(regionsScope)
	if err != nil {
		return res, err
	}
	atMirror, err := mirror.resource(regionsScope)
	if err != nil {
		return res, err
	}
	progress("regions: %d GETs of each kind", b.cfg.regionsGets)
	var samples [3][]time.Duration
	for i := 0; i < b.cfg.regionsGets; i++ {
		name := objectName("prop", i%b.cfg.regionsObjects)
		for k := 0; k < 3; k++ {
			kind := (i + k) % 3
			r, opts := atMirror, getConsistent
			switch kind {
			case 1:
				r, opts = atHome, getConsistent
			case 2:
				opts = getFromCache
			}
			start := time.Now()
			u, err := r.Get(ctx, name, opts)
			if err != nil {
				return res, fmt.Errorf("GET %s (kind %d): %w", name, kind, err)
			}
			samples[kind] = append(samples[kind], time.Since(start))
			// The mirror answers with its copy as the home serves the
			// original: without the copy's bookkeeping.
			if got, ok := u.GetAnnotations()[kcpcache.AnnotationHome]; u.GetName() != name || ok {
				return res, fmt.Errorf("GET %s (kind %d) returned %q with home annotation %q, want none", name, kind, u.GetName(), got)
			}
		}
	}
	res.mirrorConsistent, res.homeConsistent, res.mirrorRV0 = summarize(samples[0]), summarize(samples[1]), summarize(samples[2])
	return res, nil
}

// regionsRows adds the phase's rows.
func (b *bench) regionsRows(mem regionsMemoryResult, lag regionsLag, reads regionsReadResult) {
	b.rep.add(&row{
		ID: "10a", Metric: "regions: shard write sent at home → visible at mirror",
		Cache: p50p99(lag.mirrorSend), Baseline: p50p99(lag.homeFromSend) + " visible at home",
		CacheValue: lag.mirrorSend.P50.Seconds(), BaselineValue: lag.homeFromSend.P50.Seconds(), Unit: "s",
		Ratio: ratio(float64(lag.mirrorSend.P50), float64(lag.homeFromSend.P50)),
		RatioMeaning: fmt.Sprintf("p50 of a shard's create at the home a sent → first watch event at the mirror b ÷ the same at the home (p99 ratio %.2f); %d creates by one shard, one every %s (create p50 %s / p99 %s); resourceVersion=0 watches of the shard's partition, one at each cache",
			ratio(float64(lag.mirrorSend.P99), float64(lag.homeFromSend.P99)), lag.objects, lag.interval, ms(lag.writes.P50), ms(lag.writes.P99)),
		Details: map[string]interface{}{"mirror_from_send": lag.mirrorSend, "home_from_send": lag.homeFromSend, "writes": lag.writes},
	})
	b.rep.add(&row{
		ID: "10b", Metric: "  same, write acknowledged → visible (p99)",
		Cache: p50p99(lag.mirror), Baseline: p50p99(lag.home) + " visible at home",
		CacheValue: lag.mirror.P99.Seconds(), BaselineValue: lag.home.P99.Seconds(), Unit: "s",
		Ratio: ratio(float64(lag.mirror.P99), float64(lag.home.P99)),
		RatioMeaning: fmt.Sprintf("p99 of the create's acknowledgement → first watch event at the mirror ÷ the same at the home (p99, because the home's watch event came before the acknowledgement for %d of %d objects, counted as 0, so its p50 is %s; the mirror's came first for %d)",
			lag.homeBeforeAck, lag.objects, ms(lag.home.P50), lag.mirrorBeforeAck),
		Details: map[string]interface{}{"mirror": lag.mirror, "home": lag.home},
	})
	b.rep.add(&row{
		ID: "10g", Metric: "regions: resourceVersion=0 GET at mirror while the home writes",
		Cache: p50p99(lag.readsDuring), Baseline: p50p99(reads.mirrorRV0) + " with no writes (10d)",
		CacheValue: lag.readsDuring.P50.Seconds(), BaselineValue: reads.mirrorRV0.P50.Seconds(), Unit: "s",
		Ratio: ratio(float64(lag.readsDuring.P50), float64(reads.mirrorRV0.P50)),
		RatioMeaning: fmt.Sprintf("p50 of %d resourceVersion=0 GETs at the mirror of the object the shard created last, one every %s during rows 10a-10b's creates (a stale read holds the type's mirror stream while it is answered, so that its home-revision header is exact), ÷ p50 of row 10d's (p99 ratio %.2f)",
			lag.readsDuring.N, regionsReadInterval, ratio(float64(lag.readsDuring.P99), float64(reads.mirrorRV0.P99))),
	})
	b.rep.add(&row{
		ID: "10c", Metric: "regions: consistent GET at mirror (freshness check)",
		Cache: p50p99(reads.mirrorConsistent), Baseline: p50p99(reads.homeConsistent) + " consistent at home",
		CacheValue: reads.mirrorConsistent.P50.Seconds(), BaselineValue: reads.homeConsistent.P50.Seconds(), Unit: "s",
		Ratio: ratio(float64(reads.mirrorConsistent.P50), float64(reads.homeConsistent.P50)),
		RatioMeaning: fmt.Sprintf("p50 of a consistent GET of one of the home's objects at the mirror (asks the home for its revision, waits for the mirror) ÷ p50 of the same GET at the home (p99 ratio %.2f; %d GETs each, sequential, interleaved)",
			ratio(float64(reads.mirrorConsistent.P99), float64(reads.homeConsistent.P99)), reads.mirrorConsistent.N),
		Details: map[string]interface{}{"mirror_consistent": reads.mirrorConsistent, "home_consistent": reads.homeConsistent, "mirror_rv0": reads.mirrorRV0},
	})
	b.rep.add(&row{
		ID: "10d", Metric: "regions: resourceVersion=0 GET at mirror (stale read)",
		Cache: p50p99(reads.mirrorRV0), Baseline: p50p99(reads.homeConsistent) + " consistent at home",
		CacheValue: reads.mirrorRV0.P50.Seconds(), BaselineValue: reads.homeConsistent.P50.Seconds(), Unit: "s",
		Ratio:        ratio(float64(reads.mirrorRV0.P50), float64(reads.homeConsistent.P50)),
		RatioMeaning: fmt.Sprintf("p50 of a resourceVersion=0 GET at the mirror (its own copy, no check) ÷ p50 of a consistent GET at the home (p99 ratio %.2f)", ratio(float64(reads.mirrorRV0.P99), float64(reads.homeConsistent.P99))),
	})

	// The mirror's growth includes what its restart with a peer adds by
	// itself (the control); the row states the growth net of it, and both.
	n := float64(mem.objects)
	per := func(after, before uint64) float64 { return (float64(after) - float64(before)) / n }
	control := func(f func(memSnapshot) uint64) float64 {
		return float64(f(mem.controlAfter)) - float64(f(mem.controlBefore))
	}
	heap := func(m memSnapshot) uint64 { return m.HeapAlloc }
	rss := func(m memSnapshot) uint64 { return m.VmRSS }
	anon := func(m memSnapshot) uint64 { return m.RssAnon }
	for _, x := range []struct {
		id, what string
		get      func(memSnapshot) uint64
		more     string
	}{
		{"10e", "heap", heap, "live heap (runtime.MemStats.HeapAlloc after two GCs)"},
		{"10f", "RSS", rss, fmt.Sprintf("VmRSS (anonymous memory: mirror %.0f B, home %.0f B per object, net of the control's %s; the rest is etcd's mmapped database files)",
			per(mem.mirrored.RssAnon, mem.loaded.RssAnon)-control(anon)/n, per(mem.loaded.RssAnon, mem.before.RssAnon), mibSigned(control(anon)))},
	} {
		homePer := per(x.get(mem.loaded), x.get(mem.before))
		rawPer := per(x.get(mem.mirrored), x.get(mem.loaded))
		netPer := rawPer - control(x.get)/n
		b.rep.add(&row{
			ID: x.id, Metric: fmt.Sprintf("regions: %s per mirrored object (%d objects)", x.what, mem.objects),
			Cache: fmt.Sprintf("%.0f B", netPer), Baseline: fmt.Sprintf("%.0f B per object at home", homePer),
			CacheValue: netPer, BaselineValue: homePer, Unit: "bytes",
			Ratio: ratio(netPer, homePer),
			RatioMeaning: fmt.Sprintf("%s growth of the whole process per object while the mirror b restarted with its peer and copied the %d objects, net of the control (b restarted with its peer while a held none of them: %s), ÷ growth per object while the home a took them from their shards, b not peering; %.0f B per object before subtracting the control; %s",
				x.what, mem.objects, mibSigned(control(x.get)), rawPer, x.more),
			Details: map[string]interface{}{"before": x.get(mem.before), "loaded": x.get(mem.loaded), "mirrored": x.get(mem.mirrored),
				"control_before": x.get(mem.controlBefore), "control_after": x.get(mem.controlAfter)},
		})
	}
	b.rep.note("regions: heap growth per object by origin (sampled heap profile, estimates; the mirror's net of the control): mirror %s; home %s",
		formatOrigins(netGrowth(growthByOrigin(mem.loaded, mem.mirrored, n), growthByOrigin(mem.controlBefore, mem.controlAfter, n))),
		formatOrigins(growthByOrigin(mem.before, mem.loaded, n)))
	b.rep.Environment["regions_memory_load"] = fmt.Sprintf("%d objects at a in %s (%d concurrent clients, as their shards)", mem.objects, mem.loadTime.Round(time.Millisecond), b.cfg.loadConcurrency)
	b.rep.Environment["regions_mirror_sync"] = fmt.Sprintf("b restarted with its peer in %s, then held the %d copies %s later", mem.restartTime.Round(time.Millisecond), mem.objects, mem.syncTime.Round(time.Millisecond))
	b.rep.note("regions: two more cache servers (a, the home; b, the mirror), each with its own embedded etcd with fsync, in this process besides the bench's own (idle during the phase); a peers with b and, from the memory measurement's second step on, b with a; peers authenticate with static tokens as %s", kcpcache.PeerUser("<name>"))
}

// growthByOrigin is the heap growth per object by origin between two
// snapshots, largest first.
func growthByOrigin(before, after memSnapshot, n float64) []siteDelta {
	var out []siteDelta
	for k, v := range after.ByOrigin {
		out = append(out, siteDelta{Site: k, Bytes: (v - before.ByOrigin[k]) / n})
	}
	sortDeltas(out)
	return out
}

// netGrowth subtracts control from growth, origin by origin.
func netGrowth(growth, control []siteDelta) []siteDelta {
	c := map[string]float64{}
	for _, d := range control {
		c[d.Site] = d.Bytes
	}
	out := make([]siteDelta, 0, len(growth))
	for _, d := range growth {
		out = append(out, siteDelta{Site: d.Site, Bytes: d.Bytes - c[d.Site]})
	}
	sortDeltas(out)
	return out
}

// formatOrigins renders growth per object by origin on one line.
func formatOrigins(d []siteDelta) string {
	parts := make([]string, 0, len(d))
	for _, x := range d {
		parts = append(parts, fmt.Sprintf("%.0f B %s", x.Bytes, x.Site))
	}
	return strings.Join(parts, ", ")
}

// mibSigned renders a byte difference in MiB with its sign.
func mibSigned(b float64) string {
	if math.Abs(b) < 1 {
		return "0 MiB"
	}
	return fmt.Sprintf("%+.1f MiB", b/(1<<20))
}
