package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

// The relays phase measures a chain of caches, each peering only with its
// neighbours: home – r1 – r2 – r3. The shard writes at the home; r1 mirrors
// it, r2 takes the home's partitions through r1, r3 through r2 and r1
// (cache/server/homes/routes.go, cache/server/mirror/relay.go). A
// consistent read at r3 is confirmed by a revision question that goes
// r3 → r2 → r1 → home and back.

// relayChain are the caches of the chain, the home first, each one hop
// further from it.
var relayChain = []string{"home", "r1", "r2", "r3"}

// relaysScope is the partition the shard writes at the home.
var relaysScope = kcpcache.Scope{Shard: "shard-at-home", Cluster: "root"}

// idleType is a type the shard never writes: its consistent reads are
// confirmed like those of the written type, while no event of it moves
// the mirror's stream of it.
var idleType = schema.GroupVersionResource{Group: "apis.kcp.io", Version: "v1alpha1", Resource: "apiresourceschemas"}

// idleResource is an admin client of the idle type in the relays scope at
// this cache.
func (r *regionCache) idleResource() (dynamic.ResourceInterface, error) {
	cfg := r.srv.Config()
	cfg.Host = kcpcache.JoinHostPath(cfg.Host, kcpcache.ScopedPathPrefix(relaysScope))
	dc, err := dynamic.NewForConfigAndClient(cfg, r.admin)
	if err != nil {
		return nil, err
	}
	return dc.Resource(idleType), nil
}

// relayNet is the chain of the phase.
type relayNet struct {
	g      peerGraph
	names  []string
	caches map[string]*regionCache
}

func (n *relayNet) stop() {
	for _, c := range n.caches {
		_ = c.srv.Stop()
	}
}

// startUnpeered starts cache name without peers; its neighbours in the
// graph may read it.
func (b *bench) startUnpeered(ctx context.Context, dir string, n *relayNet, name string) error {
	sub := filepath.Join(dir, name)
	if err := os.Mkdir(sub, 0o700); err != nil {
		return err
	}
	c, err := b.startRegion(ctx, sub, name, n.g[name], nil)
	if err != nil {
		return err
	}
	n.caches[name] = c
	return nil
}

// peer restarts every cache with its neighbours as peers.
func (b *bench) peer(ctx context.Context, n *relayNet) error {
	for _, name := range n.names {
		var peers []string
		for _, p := range n.g[name] {
			flag, err := n.caches[p].peerFlag(name)
			if err != nil {
				return err
			}
			peers = append(peers, flag)
		}
		if err := n.caches[name].restart(ctx, b.cfg.serverFlags, peers); err != nil {
			return fmt.Errorf("restarting cache %s with its peers: %w", name, err)
		}
	}
	return nil
}

// etcdRevision is the current revision of the cache's etcd.
func (r *regionCache) etcdRevision(ctx context.Context) (int64, error) {
	resp, err := r.srv.EtcdClient().Get(ctx, "/", clientv3.WithCountOnly())
	if err != nil {
		return 0, err
	}
	return resp.Header.Revision, nil
}

// homesTable reads a cache's table of claims and routes as its admin.
func (r *regionCache) homesTable(ctx context.Context) (kcpcache.HomesAnswer, error) {
	var ans kcpcache.HomesAnswer
	req, err := newGet(ctx, kcpcache.JoinHostPath(r.srv.Config().Host, kcpcache.HomesPath))
	if err != nil {
		return ans, err
	}
	resp, err := r.admin.Do(req)
	if err != nil {
		return ans, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return ans, err
	}
	if resp.StatusCode != http.StatusOK {
		return ans, fmt.Errorf("%s's homes table: %s: %s", r.name, resp.Status, body)
	}
	return ans, json.Unmarshal(body, &ans)
}

// waitRoutes waits until every cache's table offers a route to every other
// cache along the graph's shortest path.
func (n *relayNet) waitRoutes(ctx context.Context) error {
	for _, name := range n.names {
		c := n.caches[name]
		last := "not read"
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, regionsSyncTimeout, true, func(ctx context.Context) (bool, error) {
			ans, err := c.homesTable(ctx)
			if err != nil {
				last = err.Error()
				return false, nil
			}
			routes := map[string][]string{}
			for _, r := range ans.Routes {
				routes[r.Home] = r.Path
			}
			for _, home := range n.names {
				if want := n.g.path(name, home); home != name && !slices.Equal(routes[home], want) {
					last = fmt.Sprintf("route to %s: %v, want %v", home, routes[home], want)
					return false, nil
				}
			}
			return true, nil
		})
		if err != nil {
			return fmt.Errorf("waiting for cache %s's routes (last: %s): %w", name, last, err)
		}
	}
	return nil
}

// waitConsistent waits until a consistent GET of name answers at every
// cache of the chain.
func (n *relayNet) waitConsistent(ctx context.Context, name string) error {
	for _, cache := range n.names {
		r, err := n.caches[cache].resource(relaysScope)
		if err != nil {
			return err
		}
		last := "not read"
		err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, regionsSyncTimeout, true, func(ctx context.Context) (bool, error) {
			if _, err := r.Get(ctx, name, getConsistent); err != nil {
				last = err.Error()
				return false, nil
			}
			return true, nil
		})
		if err != nil {
			return fmt.Errorf("waiting for a consistent GET of %s at %s (last: %s): %w", name, cache, last, err)
		}
	}
	return nil
}

// revisionAsker asks a cache the revision question of the relays scope's
// apiexports as its downstream neighbour asks it along the path: with that
// neighbour's peer token, naming the home when the cache relays it.
type revisionAsker struct {
	from, to string
	hc       *http.Client
	url      string
	relayed  bool
}

func newRevisionAsker(from string, to *regionCache, home string) (*revisionAsker, error) {
	cfg := rest.AnonymousClientConfig(to.srv.Config())
	cfg.BearerToken = regionPeerToken(from, to.name)
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	q := url.Values{"shard": {relaysScope.Shard}, "resource": {apiExports.GroupResource().String()}}
	if home != to.name {
		q.Set(kcpcache.RevisionHomeParameter, home)
	}
	return &revisionAsker{from: from, to: to.name, hc: hc, url: kcpcache.JoinHostPath(cfg.Host, kcpcache.RevisionPath) + "?" + q.Encode(), relayed: home != to.name}, nil
}

func (a *revisionAsker) ask(ctx context.Context) error {
	req, err := newGet(ctx, a.url)
	if err != nil {
		return err
	}
	resp, err := a.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("revision question at %s as %s: %s: %s", a.to, a.from, resp.Status, body)
	}
	var ans kcpcache.HomeRevisionAnswer
	if err := json.Unmarshal(body, &ans); err != nil {
		return err
	}
	if ans.Cache != a.to || (ans.Relayed != nil) != a.relayed {
		return fmt.Errorf("revision question at %s as %s: answered %s", a.to, a.from, body)
	}
	return nil
}

// relaysResult is everything the phase measured.
type relaysResult struct {
	types int
	// Memory: before the chain, with the home alone (no peers), with the
	// four caches peering, routes settled, idle.
	before, homeAlone, chain memSnapshot
	// measuredStreams are the streams the only cache that mirrors a peer
	// runs to it, counted from the kcp_cache_mirror_applied_revision
	// series of that peer: "r1 -> home" and "r2 -> r3".
	measuredStreams map[string]int
	startTime       time.Duration
	routesTime      time.Duration
	firstReadTime   time.Duration
	lag             relaysLag
	reads           relaysReads
}

// relaysLag is the propagation along the chain.
type relaysLag struct {
	objects  int
	interval time.Duration
	writes   summary
	// By cache: write acknowledged → first watch event (zero when it came
	// before the acknowledgement), write sent → first watch event.
	fromAck, fromSend map[string]summary
	beforeAck         map[string]int
	// idle are the consistent LISTs of the idle type at each mirror
	// during the writes and after them; revisions are each cache's etcd
	// revision after the last write.
	idle      map[string]idleReads
	revisions map[string]int64
}

// relaysReads are the GETs and revision questions, by kind.
type relaysReads struct {
	samples map[string]summary
	errors  map[string]int
}

// relays measures the chain home – r1 – r2 – r3: the memory of a cache in
// it, the lag of a write at the home at each hop, the cost of a consistent
// GET at each hop against one at the home and a stale GET at the same
// cache, the revision question each hop answers, consistent LISTs of a
// type the shard never writes at each hop while it writes another (and
// how long after the writes that type is read consistently again); the
// mirror's streams per cache in the tree of the integration tests against
// a full mesh of the same caches; and, once the chain stopped, the memory
// of an upstream cache that holds a curated subset of its region's data
// against one that holds everything (curated.go).
func (b *bench) relays(ctx context.Context) error {
	dir, err := os.MkdirTemp("", "kcp-cache-bench-relays-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	logger := klog.FromContext(ctx).WithName("relays")
	var res relaysResult
	n := &relayNet{g: chainOf(relayChain...), names: relayChain, caches: map[string]*regionCache{}}
	defer n.stop()

	if res.before, err = takeMemSnapshot(); err != nil {
		return err
	}
	progress("relays: starting the chain %s, each cache with its own embedded etcd, first without peers", strings.Join(relayChain, " – "))
	start := time.Now()
	if err := b.startUnpeered(ctx, dir, n, relayChain[0]); err != nil {
		return err
	}
	if res.homeAlone, err = takeMemSnapshot(); err != nil {
		return err
	}
	for _, name := range relayChain[1:] {
		if err := b.startUnpeered(ctx, dir, n, name); err != nil {
			return err
		}
	}
	if err := b.peer(ctx, n); err != nil {
		return err
	}
	res.startTime = time.Since(start)
	progress("relays: every cache restarted with its neighbours as peers in %s; waiting for the routes", res.startTime.Round(time.Millisecond))
	start = time.Now()
	if err := n.waitRoutes(ctx); err != nil {
		return err
	}
	res.routesTime = time.Since(start)
	home := n.caches[relayChain[0]]
	writers := &shardWriters{srv: home.srv, clients: map[string]*http.Client{}}
	writer, err := writers.resource(relaysScope)
	if err != nil {
		return err
	}
	first, err := b.object(objectName("hop-first", 0))
	if err != nil {
		return err
	}
	start = time.Now()
	if _, err := writer.Create(ctx, first, createOptions); err != nil {
		return fmt.Errorf("the shard's first write at %s: %w", home.name, err)
	}
	if err := n.waitConsistent(ctx, first.GetName()); err != nil {
		return err
	}
	res.firstReadTime = time.Since(start)
	logger.Info("Chain ready", "start", res.startTime, "routes", res.routesTime, "firstConsistentReadEverywhere", res.firstReadTime)
	progress("relays: routes settled in %s; the shard's first object read consistently at every cache %s after its write", res.routesTime.Round(time.Millisecond), res.firstReadTime.Round(time.Millisecond))
	if res.chain, err = takeMemSnapshot(); err != nil {
		return err
	}

	res.types = servedTypes(home)
	if res.measuredStreams, err = countStreams(ctx, home, map[string]string{"r1 -> home": "home", "r2 -> r3": "r3"}); err != nil {
		return err
	}
	if res.lag, err = b.relaysPropagation(ctx, n, writer); err != nil {
		return err
	}
	if res.reads, err = b.relaysReads(ctx, n); err != nil {
		return err
	}
	b.relaysRows(res)

	// The curated promotion's memory, in a process the chain has left.
	n.stop()
	sub := filepath.Join(dir, "curated")
	if err := os.Mkdir(sub, 0o700); err != nil {
		return err
	}
	curated, err := b.curatedMemory(ctx, sub)
	if err != nil {
		return fmt.Errorf("curated promotion: %w", err)
	}
	b.curatedRows(curated)
	return nil
}

// servedTypes is the number of types a cache's mirror streams from each
// peer: every served type with a version (cache/server/hierarchy.go's
// newMirror).
func servedTypes(c *regionCache) int {
	n := 0
	for _, r := range c.srv.Server().Types().Resources() {
		if len(r.Versions) > 0 {
			n++
		}
	}
	return n
}

// countStreams counts, for each named peer, the types with a
// kcp_cache_mirror_applied_revision series of that peer (set by each
// stream's first list). The caches share this process's metrics registry,
// so a peer's series count one cache's streams only where a single cache
// mirrors that peer.
func countStreams(ctx context.Context, c *regionCache, peers map[string]string) (map[string]int, error) {
	req, err := newGet(ctx, kcpcache.JoinHostPath(c.srv.Config().Host, "/metrics"))
	if err != nil {
		return nil, err
	}
	resp, err := c.admin.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("metrics of %s: %s", c.name, resp.Status)
	}
	samples := parseMetrics(body)
	out := map[string]int{}
	for what, peer := range peers {
		types := map[string]bool{}
		for _, s := range samples {
			if s.name == "kcp_cache_mirror_applied_revision" && s.labels["peer"] == peer {
				types[s.labels["resource"]] = true
			}
		}
		out[what] = len(types)
	}
	return out, nil
}

// relaysPropagation has the shard create objects at the home at a steady
// pace while a resourceVersion=0 watch at every cache of the chain records
// when each appears there.
func (b *bench) relaysPropagation(ctx context.Context, n *relayNet, writer dynamic.ResourceInterface) (relaysLag, error) {
	res := relaysLag{objects: b.cfg.relaysObjects, interval: b.cfg.relaysInterval,
		fromAck: map[string]summary{}, fromSend: map[string]summary{}, beforeAck: map[string]int{},
		idle: map[string]idleReads{}}
	watchCtx, stopWatches := context.WithCancel(ctx)
	defer stopWatches()
	seen := map[string]*sightings{}
	errcs := map[string]<-chan error{}
	for _, name := range n.names {
		r, err := n.caches[name].resource(relaysScope)
		if err != nil {
			return res, err
		}
		if seen[name], errcs[name], err = watchSightings(watchCtx, r); err != nil {
			return res, fmt.Errorf("watching at %s: %w", name, err)
		}
	}
	progress("relays: shard %s creates %d objects at %s, one every %s; a resourceVersion=0 watch at each of %s; consistent LISTs of %s (never written) at each mirror, one after another", relaysScope.Shard, res.objects, n.names[0], res.interval, strings.Join(n.names, ", "), idleType.Resource)
	readers := map[string]*idleReader{}
	idleDone := make(chan struct{})
	var lastAck time.Time
	readCtx, stopReaders := context.WithCancel(ctx)
	defer stopReaders()
	for _, name := range n.names[1:] {
		r, err := n.caches[name].idleResource()
		if err != nil {
			return res, err
		}
		readers[name] = &idleReader{cache: name, r: r, done: make(chan struct{})}
		go readers[name].run(readCtx, idleDone, &lastAck)
	}
	sent := make([]time.Time, res.objects)
	acked := make([]time.Time, res.objects)
	writes := make([]time.Duration, 0, res.objects)
	pace := time.NewTicker(res.interval)
	defer pace.Stop()
	for i := range res.objects {
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-pace.C:
		}
		obj, err := b.object(objectName("hop", i))
		if err != nil {
			return res, err
		}
		sent[i] = time.Now()
		if _, err := writer.Create(ctx, obj, createOptions); err != nil {
			return res, fmt.Errorf("creating %s at %s: %w", obj.GetName(), n.names[0], err)
		}
		acked[i] = time.Now()
		writes = append(writes, acked[i].Sub(sent[i]))
	}
	res.writes = summarize(writes)
	// The readers read lastAck only after idleDone is closed.
	lastAck = acked[res.objects-1]
	close(idleDone)
	res.revisions = map[string]int64{}
	for _, name := range n.names {
		rev, err := n.caches[name].etcdRevision(ctx)
		if err != nil {
			return res, err
		}
		res.revisions[name] = rev
	}

	// Bounded: every object must reach every watcher. A watcher also saw
	// the shard's first object, so each object is looked for by name.
	sawAll := func(name string) int {
		n := 0
		for i := range res.objects {
			if _, ok := seen[name].seen(objectName("hop", i)); ok {
				n++
			}
		}
		return n
	}
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, regionsSyncTimeout, true, func(context.Context) (bool, error) {
		done := true
		for _, name := range n.names {
			select {
			case err := <-errcs[name]:
				return false, fmt.Errorf("the watch at %s: %w", name, err)
			default:
			}
			done = done && sawAll(name) == res.objects
		}
		return done, nil
	})
	if err != nil {
		counts := make([]string, 0, len(n.names))
		for _, name := range n.names {
			counts = append(counts, fmt.Sprintf("%s %d", name, sawAll(name)))
		}
		return res, fmt.Errorf("waiting for the watchers (%s of %d): %w", strings.Join(counts, ", "), res.objects, err)
	}
	for _, name := range n.names {
		var fromAck, fromSend []time.Duration
		for i := range res.objects {
			at, ok := seen[name].seen(objectName("hop", i))
			if !ok {
				return res, fmt.Errorf("the watcher at %s never saw %s", name, objectName("hop", i))
			}
			d := at.Sub(acked[i])
			if d < 0 {
				res.beforeAck[name]++
				d = 0
			}
			fromAck = append(fromAck, d)
			fromSend = append(fromSend, at.Sub(sent[i]))
		}
		res.fromAck[name], res.fromSend[name] = summarize(fromAck), summarize(fromSend)
	}
	// Bounded as well: each reader ends once a LIST it started after the
	// last write answered, or when the bound runs out.
	bound := time.NewTimer(regionsSyncTimeout)
	defer bound.Stop()
	for _, name := range n.names[1:] {
		select {
		case <-readers[name].done:
		case <-bound.C:
			stopReaders()
			<-readers[name].done
		case <-ctx.Done():
			return res, ctx.Err()
		}
		res.idle[name] = readers[name].result()
	}
	return res, nil
}

// idleReader LISTs the idle type consistently at one cache, one LIST after
// another: while the shard writes, and after the writes until a LIST
// started after the last write's acknowledgement answers.
type idleReader struct {
	cache string
	r     dynamic.ResourceInterface
	done  chan struct{}

	// Only run writes these until done is closed.
	answered, refused []time.Duration
	firstRefusal      string
	refusedAfter      int
	recovered         time.Duration
}

// idleReads is what an idleReader measured.
type idleReads struct {
	// answered and refused are the LISTs during the writes that answered
	// 200 and that failed (a 503), by their duration.
	answered, refused summary
	firstRefusal      string
	// refusedAfter counts the failed LISTs after the writes, recovered is
	// the time from the last write's acknowledgement until a LIST answered
	// (-1: not within the bound).
	refusedAfter int
	recovered    time.Duration
}

func (r *idleReader) result() idleReads {
	return idleReads{answered: summarize(r.answered), refused: summarize(r.refused), firstRefusal: r.firstRefusal, refusedAfter: r.refusedAfter, recovered: r.recovered}
}

func (r *idleReader) run(ctx context.Context, writesDone <-chan struct{}, lastAck *time.Time) {
	defer close(r.done)
	logger := klog.FromContext(ctx).WithName("relays")
	r.recovered = -1
	for ctx.Err() == nil {
		after := false
		select {
		case <-writesDone:
			after = true
		default:
		}
		start := time.Now()
		_, err := r.r.List(ctx, listConsistent)
		took := time.Since(start)
		if ctx.Err() != nil {
			return
		}
		if err != nil && r.firstRefusal == "" {
			r.firstRefusal = err.Error()
			logger.Info("A consistent LIST of a type the shard never writes failed; counting it and the further ones", "cache", r.cache, "resource", idleType.GroupResource().String(), "after", took, "err", err)
		}
		switch {
		case !after && err == nil:
			r.answered = append(r.answered, took)
		case !after:
			r.refused = append(r.refused, took)
		case err != nil:
			r.refusedAfter++
		default:
			// Started after writesDone was closed, so after lastAck.
			r.recovered = time.Since(*lastAck)
			return
		}
	}
}

// A kind of read of the relays phase, by name.
func consistentAt(cache string) string { return "consistent GET at " + cache }
func staleAt(cache string) string      { return "resourceVersion=0 GET at " + cache }
func idleAt(cache string) string       { return "consistent LIST of the idle type at " + cache }
func questionAt(cache, from string) string {
	return "revision question at " + cache + " (as " + from + " asks it)"
}

// relaysReads GETs the propagation's objects one after another in every
// kind, in rotating order: consistent at each cache of the chain,
// resourceVersion=0 at each mirror, and the revision question each cache
// on the path answers its downstream neighbour (the home its own, each
// relay the home's, confirmed along its own path first).
func (b *bench) relaysReads(ctx context.Context, n *relayNet) (relaysReads, error) {
	logger := klog.FromContext(ctx).WithName("relays")
	res := relaysReads{samples: map[string]summary{}, errors: map[string]int{}}
	type kind struct {
		name string
		do   func(ctx context.Context, object string) error
	}
	var kinds []kind
	get := func(cache string, opts metav1.GetOptions) (func(context.Context, string) error, error) {
		r, err := n.caches[cache].resource(relaysScope)
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context, object string) error {
			u, err := r.Get(ctx, object, opts)
			if err != nil {
				return err
			}
			// A mirror serves a copy as the home serves the original:
			// without the copy's bookkeeping.
			if got, ok := u.GetAnnotations()[kcpcache.AnnotationHome]; u.GetName() != object || ok {
				return fmt.Errorf("GET %s at %s returned %q with home annotation %q, want none", object, cache, u.GetName(), got)
			}
			return nil
		}, nil
	}
	home := n.names[0]
	for _, cache := range n.names {
		do, err := get(cache, getConsistent)
		if err != nil {
			return res, err
		}
		kinds = append(kinds, kind{consistentAt(cache), do})
	}
	for _, cache := range n.names[1:] {
		do, err := get(cache, getFromCache)
		if err != nil {
			return res, err
		}
		kinds = append(kinds, kind{staleAt(cache), do})
	}
	for _, cache := range n.names[1:] {
		r, err := n.caches[cache].idleResource()
		if err != nil {
			return res, err
		}
		kinds = append(kinds, kind{idleAt(cache), func(ctx context.Context, _ string) error {
			_, err := r.List(ctx, listConsistent)
			return err
		}})
	}
	for i, cache := range n.names[:len(n.names)-1] {
		from := n.names[i+1]
		a, err := newRevisionAsker(from, n.caches[cache], home)
		if err != nil {
			return res, err
		}
		kinds = append(kinds, kind{questionAt(cache, from), func(ctx context.Context, _ string) error { return a.ask(ctx) }})
	}
	progress("relays: %d of each of %d kinds of read, interleaved", b.cfg.relaysGets, len(kinds))
	samples := map[string][]time.Duration{}
	for i := range b.cfg.relaysGets {
		object := objectName("hop", i%b.cfg.relaysObjects)
		for k := range kinds {
			kd := kinds[(i+k)%len(kinds)]
			start := time.Now()
			if err := kd.do(ctx, object); err != nil {
				if ctx.Err() != nil {
					return res, ctx.Err()
				}
				if res.errors[kd.name] == 0 {
					logger.Error(err, "A read of the relays phase failed; counting it, and its kind's further failures", "kind", kd.name, "object", object)
				}
				res.errors[kd.name]++
				continue
			}
			samples[kd.name] = append(samples[kd.name], time.Since(start))
		}
	}
	for _, kd := range kinds {
		res.samples[kd.name] = summarize(samples[kd.name])
	}
	return res, nil
}

// relaysRows adds the phase's rows.
func (b *bench) relaysRows(res relaysResult) {
	names := relayChain
	home := names[0]
	lag := res.lag
	r1 := names[1]
	for i, cache := range names[1:] {
		hops := i + 1
		got := lag.fromAck[cache]
		r := &row{
			ID:         fmt.Sprintf("12%c", 'a'+i),
			Metric:     fmt.Sprintf("relays: mirror lag, %d hop%s: write acknowledged at %s → visible at %s", hops, plural(hops), home, cache),
			Cache:      p50p99(got),
			CacheValue: got.P50.Seconds(), Unit: "s",
			Details: map[string]interface{}{"from_ack": got, "from_send": lag.fromSend[cache], "before_ack": lag.beforeAck[cache],
				"home_from_send": lag.fromSend[home], "home_from_ack": lag.fromAck[home], "writes": lag.writes},
		}
		if hops == 1 {
			r.Baseline, r.BaselineValue = p50p99(lag.writes)+" the create at "+home+" (sent → acknowledged)", lag.writes.P50.Seconds()
			r.Ratio = ratio(float64(got.P50), float64(lag.writes.P50))
			r.RatioMeaning = fmt.Sprintf("p50 of the time from a create's acknowledgement at the home to its first watch event at %s (a resourceVersion=0 watch of the partition) ÷ p50 of the create itself (p99 ratio %.2f); %d creates by one shard, one every %s; the home's own watch: %s from the create sent, %d of %d events before the acknowledgement",
				cache, ratio(float64(got.P99), float64(lag.writes.P99)), lag.objects, lag.interval, p50p99(lag.fromSend[home]), lag.beforeAck[home], lag.objects)
		} else {
			base := lag.fromAck[r1]
			r.Baseline, r.BaselineValue = p50p99(base)+" at "+r1+" (1 hop)", base.P50.Seconds()
			r.Ratio = ratio(float64(got.P50), float64(base.P50))
			prev := lag.fromAck[names[hops-1]]
			r.RatioMeaning = fmt.Sprintf("p50 of the same lag at %s (%d hops: %s) ÷ p50 at %s (p99 ratio %.2f); this hop adds %s at p50 over %s",
				cache, hops, strings.Join(relayPathFrom(cache), " ← "), r1, ratio(float64(got.P99), float64(base.P99)), ms(got.P50-prev.P50), names[hops-1])
		}
		b.rep.add(r)
	}

	reads := res.reads
	atHome := reads.samples[consistentAt(home)]
	errNote := func(kind string) string {
		if e := reads.errors[kind]; e > 0 {
			return fmt.Sprintf("%d of %d failed (not timed; the first is logged)", e, b.cfg.relaysGets)
		}
		return ""
	}
	for i, cache := range names[1:] {
		hops := i + 1
		c, stale := reads.samples[consistentAt(cache)], reads.samples[staleAt(cache)]
		b.rep.add(&row{
			ID:     fmt.Sprintf("12%c", 'd'+i),
			Metric: fmt.Sprintf("relays: consistent GET at %s (%d hop%s from the home)", cache, hops, plural(hops)),
			Cache:  p50p99(c), Baseline: p50p99(atHome) + " consistent at " + home,
			CacheValue: c.P50.Seconds(), BaselineValue: atHome.P50.Seconds(), Unit: "s",
			Ratio: ratio(float64(c.P50), float64(atHome.P50)),
			RatioMeaning: fmt.Sprintf("p50 of a consistent GET of one of the home's objects at %s (confirmed by a revision question along %s) ÷ p50 of a consistent GET at the home (p99 ratio %.2f); ÷ the resourceVersion=0 GET at %s: %.2f (p99 %.2f); %d GETs of each kind, sequential, interleaved",
				cache, strings.Join(relayPathFrom(cache), " → "), ratio(float64(c.P99), float64(atHome.P99)), cache, ratio(float64(c.P50), float64(stale.P50)), ratio(float64(c.P99), float64(stale.P99)), c.N),
			Note:    errNote(consistentAt(cache)),
			Details: map[string]interface{}{"consistent": c, "stale": stale, "home_consistent": atHome},
		})
	}
	for i, cache := range names[1:] {
		stale := reads.samples[staleAt(cache)]
		b.rep.add(&row{
			ID:     fmt.Sprintf("12%c", 'g'+i),
			Metric: fmt.Sprintf("relays: resourceVersion=0 GET at %s (stale read)", cache),
			Cache:  p50p99(stale), Baseline: p50p99(atHome) + " consistent at " + home,
			CacheValue: stale.P50.Seconds(), BaselineValue: atHome.P50.Seconds(), Unit: "s",
			Ratio:        ratio(float64(stale.P50), float64(atHome.P50)),
			RatioMeaning: fmt.Sprintf("p50 of a resourceVersion=0 GET at %s (its own copy, no check) ÷ p50 of a consistent GET at the home (p99 ratio %.2f)", cache, ratio(float64(stale.P99), float64(atHome.P99))),
			Note:         errNote(staleAt(cache)),
		})
	}
	q0 := reads.samples[questionAt(home, r1)]
	for i, cache := range names[:len(names)-1] {
		from := names[i+1]
		q := reads.samples[questionAt(cache, from)]
		r := &row{
			ID:         fmt.Sprintf("12%c", 'j'+i),
			Metric:     fmt.Sprintf("relays: revision question answered by %s, as %s asks it", cache, from),
			Cache:      p50p99(q),
			CacheValue: q.P50.Seconds(), Unit: "s",
			Note: errNote(questionAt(cache, from)),
		}
		if i == 0 {
			r.Baseline, r.BaselineValue = p50p99(atHome)+" consistent GET at "+home, atHome.P50.Seconds()
			r.Ratio = ratio(float64(q.P50), float64(atHome.P50))
			r.RatioMeaning = fmt.Sprintf("p50 of GET %s?shard=%s&resource=%s at the home with %s's peer token (the home's revision of the partition's last change) ÷ p50 of a consistent GET at the home (p99 ratio %.2f)",
				kcpcache.RevisionPath, relaysScope.Shard, apiExports.GroupResource(), from, ratio(float64(q.P99), float64(atHome.P99)))
		} else {
			r.Baseline, r.BaselineValue = p50p99(q0)+" answered by "+home, q0.P50.Seconds()
			r.Ratio = ratio(float64(q.P50), float64(q0.P50))
			r.RatioMeaning = fmt.Sprintf("p50 of the same question with %s=%s at the relay %s, which confirms its copy along %s first and answers its own revision, ÷ p50 of the question answered by the home (p99 ratio %.2f)",
				kcpcache.RevisionHomeParameter, home, cache, strings.Join(relayPathFrom(cache), " → "), ratio(float64(q.P99), float64(q0.P99)))
		}
		b.rep.add(r)
	}

	r1Idle := lag.idle[r1]
	for i, cache := range names[1:] {
		hops := i + 1
		idle, quiet := lag.idle[cache], reads.samples[idleAt(cache)]
		attempts := idle.answered.N + idle.refused.N
		cell := fmt.Sprintf("%d of %d answered", idle.answered.N, attempts)
		if idle.answered.N > 0 {
			cell += " (" + p50p99(idle.answered) + ")"
		}
		if idle.refused.N > 0 {
			cell += fmt.Sprintf("; %d refused (503) after p50 %.2f s", idle.refused.N, idle.refused.P50.Seconds())
		}
		failedQuiet := reads.errors[idleAt(cache)]
		quietShare := ratio(float64(quiet.N), float64(quiet.N+failedQuiet))
		first := ""
		if idle.firstRefusal != "" {
			first = fmt.Sprintf("; the first refusal: %q", idle.firstRefusal)
		}
		b.rep.add(&row{
			ID:     fmt.Sprintf("12%c", 'm'+i),
			Metric: fmt.Sprintf("relays: consistent LIST of a type never written, at %s (%d hop%s), while the home writes another", cache, hops, plural(hops)),
			Cache:  cell, Baseline: fmt.Sprintf("%d of %d answered (%s) after the writes", quiet.N, quiet.N+failedQuiet, p50p99(quiet)),
			CacheValue: ratio(float64(idle.answered.N), float64(attempts)), BaselineValue: quietShare, Unit: "share answered",
			Ratio: ratio(ratio(float64(idle.answered.N), float64(attempts)), quietShare),
			RatioMeaning: fmt.Sprintf("share of the consistent LISTs of %s in the shard's partition (empty) at %s, one after another during rows 12a-12c's creates of apiexports, that answered 200 (the others: 503 after the freshness wait) ÷ the share of the same LISTs that answered once the type was read consistently again at every mirror after the writes (rows 12p-12q), interleaved with the GETs of rows 12d-12l%s; etcd revisions after the last write: %s",
				idleType.GroupResource(), cache, first, formatRevisions(lag.revisions, names)),
			Details: map[string]interface{}{"answered": idle.answered, "refused": idle.refused, "quiet": quiet, "quiet_failed": failedQuiet, "first_refusal": idle.firstRefusal},
		})
	}
	for i, cache := range names[2:] {
		hops := i + 2
		idle := lag.idle[cache]
		r := &row{
			ID:         fmt.Sprintf("12%c", 'p'+i),
			Metric:     fmt.Sprintf("relays: after the last write, until that type is read consistently at %s (%d hops)", cache, hops),
			Cache:      recoveredText(idle.recovered),
			Baseline:   recoveredText(r1Idle.recovered) + " at " + r1 + " (1 hop)",
			CacheValue: idle.recovered.Seconds(), BaselineValue: r1Idle.recovered.Seconds(), Unit: "s",
			Ratio:        ratio(float64(idle.recovered), float64(r1Idle.recovered)),
			RatioMeaning: fmt.Sprintf("time from the last create's acknowledgement at the home until a consistent LIST of %s at %s, started after it, answered 200 (%d LISTs there after the writes answered 503 before it) ÷ the same at %s (%d refused before it)", idleType.GroupResource(), cache, idle.refusedAfter, r1, r1Idle.refusedAfter),
		}
		if idle.recovered < 0 || r1Idle.recovered < 0 {
			r.Ratio = math.NaN()
		}
		b.rep.add(r)
	}

	t := res.types
	tree, treeNames := relayTree()
	treeF, meshF := tree.streamFigures(t), fullMeshOf(treeNames...).streamFigures(t)
	var levels []string
	for _, name := range []string{"global", "region-a", "zone-a1"} {
		levels = append(levels, fmt.Sprintf("%s %d (%d peers)", name, treeF.perCache[name], len(tree[name])))
	}
	computed := fmt.Sprintf("computed: peers × %d served types, one stream per peer and type (cache/server/mirror/mirror.go's Run); the %d types counted in the running home's registry (the types its mirror streams: every served type with a version)", t, t)
	b.rep.add(&row{
		ID: "12r", Metric: fmt.Sprintf("relays: mirror streams of the busiest cache, tree of %d caches", len(treeNames)),
		Cache: fmt.Sprintf("%d streams", treeF.max), Baseline: fmt.Sprintf("%d streams per cache, full mesh of the same %d", meshF.max, len(treeNames)),
		CacheValue: float64(treeF.max), BaselineValue: float64(meshF.max), Unit: "streams",
		Ratio:        ratio(float64(treeF.max), float64(meshF.max)),
		RatioMeaning: fmt.Sprintf("streams a region cache runs in the tree of TestRelayTreeOfTwoLevels (global, 2 regions, 2 zones each; per level: %s) ÷ streams each cache runs in a full mesh (%d peers); %s", strings.Join(levels, ", "), len(treeNames)-1, computed),
	})
	b.rep.add(&row{
		ID: "12s", Metric: fmt.Sprintf("relays: mirror streams of all %d caches, tree", len(treeNames)),
		Cache: fmt.Sprintf("%d streams", treeF.total), Baseline: fmt.Sprintf("%d streams, full mesh", meshF.total),
		CacheValue: float64(treeF.total), BaselineValue: float64(meshF.total), Unit: "streams",
		Ratio:        ratio(float64(treeF.total), float64(meshF.total)),
		RatioMeaning: fmt.Sprintf("all streams of the tree (%d peerings, each both ways) ÷ all of the full mesh (%d); %s", len(treeNames)-1, len(treeNames)*(len(treeNames)-1)/2, computed),
	})
	measured := res.measuredStreams["r1 -> home"]
	b.rep.add(&row{
		ID: "12t", Metric: "relays: streams r1 runs to its peer home, counted in the metrics",
		Cache: fmt.Sprintf("%d streams", measured), Baseline: fmt.Sprintf("%d computed (1 peer × %d types)", t, t),
		CacheValue: float64(measured), BaselineValue: float64(t), Unit: "streams",
		Ratio: ratio(float64(measured), float64(t)),
		RatioMeaning: fmt.Sprintf("types with a kcp_cache_mirror_applied_revision{peer=\"home\"} series (each stream sets it at its first list) ÷ the computed streams of one peer; only r1 mirrors home, so the process-wide series are r1's alone (r2's streams to r3, counted the same way: %d); the chain's caches run %s streams by the computation",
			res.measuredStreams["r2 -> r3"], formatStreams(chainOf(relayChain...).streams(t), relayChain)),
	})

	perCache := func(f func(memSnapshot) uint64) float64 {
		return (float64(f(res.chain)) - float64(f(res.before))) / float64(len(names))
	}
	alone := func(f func(memSnapshot) uint64) float64 {
		return float64(f(res.homeAlone)) - float64(f(res.before))
	}
	for _, x := range []struct {
		id, what string
		get      func(memSnapshot) uint64
		more     string
	}{
		{"12u", "heap", func(m memSnapshot) uint64 { return m.HeapAlloc }, "live heap (HeapAlloc after two GCs)"},
		{"12v", "RSS", func(m memSnapshot) uint64 { return m.VmRSS }, "VmRSS, etcd's mmapped files included"},
	} {
		b.rep.add(&row{
			ID: x.id, Metric: fmt.Sprintf("relays: %s per cache of the chain, idle", x.what),
			Cache: mibOf(perCache(x.get)), Baseline: mibOf(alone(x.get)) + " the home alone, no peers",
			CacheValue: perCache(x.get), BaselineValue: alone(x.get), Unit: "bytes",
			Ratio:        ratio(perCache(x.get), alone(x.get)),
			RatioMeaning: fmt.Sprintf("%s growth of the whole process from before the chain to the four caches peering with their neighbours, routes settled, one object of the shard mirrored, ÷ 4; ÷ the growth when the home alone had started, without peers; %s", x.what, x.more),
		})
	}
	b.rep.Environment["relays_chain"] = fmt.Sprintf("started and restarted with peers in %s; routes settled %s later; the shard's first object read consistently at every cache %s after its write",
		res.startTime.Round(time.Millisecond), res.routesTime.Round(time.Millisecond), res.firstReadTime.Round(time.Millisecond))
	b.rep.note("relays: four more cache servers (%s), each with its own embedded etcd with fsync, in this process beside the bench's own (idle during the phase), each peering only with its neighbours; peers authenticate with static tokens as %s; the production freshness wait (5 s)",
		strings.Join(relayChain, " – "), kcpcache.PeerUser("<name>"))
}

// recoveredText renders an idleReads.recovered.
func recoveredText(d time.Duration) string {
	if d < 0 {
		return fmt.Sprintf("not within %s", regionsSyncTimeout)
	}
	return fmt.Sprintf("%.2f s", d.Seconds())
}

// formatRevisions renders revisions per cache in the order of names.
func formatRevisions(revs map[string]int64, names []string) string {
	parts := make([]string, 0, len(names))
	for _, name := range names {
		parts = append(parts, fmt.Sprintf("%s %d", name, revs[name]))
	}
	return strings.Join(parts, ", ")
}

// relayPathFrom is the chain's path from cache to the home.
func relayPathFrom(cache string) []string {
	return chainOf(relayChain...).path(cache, relayChain[0])
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// mibOf renders a byte count in MiB.
func mibOf(b float64) string { return fmt.Sprintf("%.1f MiB", b/(1<<20)) }

// formatStreams renders streams per cache in the order of names.
func formatStreams(streams map[string]int, names []string) string {
	parts := make([]string, 0, len(names))
	for _, name := range names {
		parts = append(parts, fmt.Sprintf("%s %d", name, streams[name]))
	}
	return strings.Join(parts, ", ")
}
