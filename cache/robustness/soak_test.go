package robustness

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/client"
	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
)

// soak: an hour of load has no place in CI's run.
var soak = flag.Bool("robustness.soak", false, "run TestRobustnessSoak for -robustness.duration (the soak: 1h)")

const (
	// soakWindow is how long each window of the soak's traffic runs: its
	// history is checked alone, so the checker's memory stays bounded
	// however long the soak.
	soakWindow = 2 * time.Minute
	// growEvery paces the objects that only grow: one per shard each time.
	growEvery = 2 * time.Second
	// relistEvery is how often each informer is replaced by a new one,
	// which lists every partition again.
	relistEvery = time.Minute
	// growCluster holds the objects that only grow, next to the traffic's
	// partitions (cluster root), so that the traffic's watches and
	// histories hold only the traffic's keys.
	growCluster = "grown"
)

// soakCluster is the soak's caches: regions a and b, each the home of a
// shard (sa, sb), and an in-memory group of three (the home of sg), every
// cache in a child process of the test binary, so that its /metrics and
// heap profile are its own.
type soakCluster struct {
	*cluster
	group *group
	// procs are every cache process, sampled.
	procs []*sampledProcess
	// homes are each shard's home, by shard, as its shard writes there.
	homes map[string]*rest.Config
	// background watches the answers of the growers and the informers.
	background *Answers
}

// startSoak starts the soak's caches and its shape: the traffic of each
// shard written at its home and read at every cache that holds it, and
// the faults, one per window, in turn.
func startSoak(t *testing.T) *soakCluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(klog.NewContext(context.Background(), klog.Background()), 3*cachetest.DefaultTimeout)
	defer cancel()
	link := cachetest.NewLinkCutter()
	regions := cachetest.StartRegions(t, ctx, cachetest.RegionsOptions{
		Via:       func(_, _, host string) string { return link.Via(t, host) },
		Processes: []string{"a", "b"},
	}, "a", "b")
	mg := startGroup(t)
	gc, g := groupShape(t, mg, "sg")
	s := &soakCluster{cluster: &cluster{}, group: g, homes: map[string]*rest.Config{}, background: &Answers{}}
	// The group's faults report to the soak's findings.
	g.found = s.findings.add
	admin := map[string]*rest.Config{}
	for _, name := range []string{"a", "b"} {
		cfg, err := regions[name].Config()
		if err != nil {
			t.Fatal(err)
		}
		admin[name] = cfg
	}
	for _, home := range []string{"a", "b"} {
		mirror := map[string]string{"a": "b", "b": "a"}[home]
		shard := "s" + home
		shardCfg := regions[home].Proc.ShardConfig(t, shard)
		s.homes[shard] = shardCfg
		p := partitionWith(t, shardCfg, shard)
		cfg := scopedTo(admin[mirror], shard)
		reader := rest.CopyConfig(cfg)
		reader.Wrap(p.answers.Wrap)
		p.readers = append(p.readers, dynamicFor(t, reader))
		stale := rest.CopyConfig(cfg)
		stale.Wrap(p.answers.Wrap)
		sr, err := NewStaleReader(client.Unthrottled(stale), home, nil)
		if err != nil {
			t.Fatal(err)
		}
		p.stale = append(p.stale, sr)
		s.parts = append(s.parts, p)
	}
	s.parts = append(s.parts, gc.parts...)
	s.homes["sg"] = mg.Processes[0].ShardConfig(t, "sg")
	for _, name := range []string{"a", "b"} {
		s.procs = append(s.procs, newSampledProcess(t, name, admin[name]))
	}
	for _, p := range mg.Processes {
		cfg, err := p.Config()
		if err != nil {
			t.Fatal(err)
		}
		s.procs = append(s.procs, newSampledProcess(t, p.Name, cfg))
	}
	// a is paused as a home is (the paused-home fault and its checks),
	// read at b.
	pausedA := &pausedHome{home: regions["a"], shard: "sa", mirrors: map[string]*Proxy{"b": memberProxy(t, admin["b"])}, found: s.findings.add, long: true}
	// In the order a short run meets the kinds first: a pause in the
	// group, a cut between the regions, a restart of a region.
	s.faultList = []fault{
		g.pauseOf("leader"),
		linkCutOf("link a-b", link, 20*time.Second),
		processRestartOf("region b", regions["b"].Proc),
		g.partitionOf("a minority cut", "m2"),
		pausedA.pauseOfHome(),
		g.restartOfMember(g.members[2]),
		compactionOf(func() *clientv3.Client { return g.etcd }),
		g.pauseOf("follower"),
		g.partitionOf("a minority cut of the member written through", "m0"),
		g.restartOfMember(g.members[1]),
		g.pauseOf("m0"),
	}
	return s
}

// scopedTo is cfg scoped to shard's partition (cluster root), asking for
// the copy's bookkeeping.
func scopedTo(cfg *rest.Config, shard string) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.Host += kcpcache.ScopedPathPrefix(kcpcache.Scope{Shard: shard, Cluster: "root"})
	return AskBookkeeping(cfg)
}

func dynamicFor(t *testing.T, cfg *rest.Config) dynamic.ResourceInterface {
	t.Helper()
	d, err := dynamic.NewForConfig(client.Unthrottled(cfg))
	if err != nil {
		t.Fatal(err)
	}
	return d.Resource(Resource)
}

// linkCutOf cuts link for d, then restores it.
func linkCutOf(what string, link *cachetest.LinkCutter, d time.Duration) fault {
	return func(_ context.Context, _ *testing.T, note func(string)) {
		note(fmt.Sprintf("%s cut for %s", what, d))
		link.Cut()
		// The cut is undone even when the traffic ends meanwhile.
		hold(d)
		link.Restore()
		note(what + " restored")
	}
}

// processRestartOf restarts a cache process on its data: its clients see
// refused connections and lost answers, its watches end, its peers lose
// it and find it again.
func processRestartOf(what string, p *cachetest.MemberProcess) fault {
	return func(ctx context.Context, t *testing.T, note func(string)) {
		note("restart of " + what)
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cachetest.DefaultTimeout)
		defer cancel()
		if err := p.Restart(rctx); err != nil {
			t.Errorf("restarting %s: %v", what, err)
		}
	}
}

// grower creates an object in its shard's partition (cluster grown) every
// growEvery and never deletes one: the data's own growth, known.
type grower struct {
	shard   string
	client  dynamic.ResourceInterface
	created atomic.Int64
}

// run creates objects until ctx ends; a create that failed is tried again,
// under the same name, on the next tick (AlreadyExists: it had been
// stored).
func (g *grower) run(ctx context.Context) {
	ticker := time.NewTicker(growEvery)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		name := fmt.Sprintf("g%06d", g.created.Load())
		rctx, cancel := context.WithTimeout(ctx, requestTimeout)
		_, err := g.client.Create(rctx, object(name, "grown", 0), metav1.CreateOptions{})
		cancel()
		if err == nil || apierrors.IsAlreadyExists(err) {
			g.created.Add(1)
		}
	}
}

// relister keeps an informer on every partition of one cache, as a kcp
// shard's wildcard informers, and replaces it with a new one every
// relistEvery: each new informer lists everything again.
type relister struct {
	name   string
	client dynamic.Interface
	// synced and failed count the informers that synced within a minute
	// and those that did not (the cache paused or restarting meanwhile).
	synced, failed atomic.Int64
}

func (r *relister) run(ctx context.Context) {
	ticker := time.NewTicker(relistEvery)
	defer ticker.Stop()
	for ctx.Err() == nil {
		factory := dynamicinformer.NewDynamicSharedInformerFactory(r.client, 0)
		informer := factory.ForResource(Resource).Informer()
		informerCtx, stop := context.WithCancel(ctx)
		factory.Start(informerCtx.Done())
		syncCtx, cancel := context.WithTimeout(informerCtx, time.Minute)
		if cache.WaitForCacheSync(syncCtx.Done(), informer.HasSynced) {
			r.synced.Add(1)
		} else if ctx.Err() == nil {
			r.failed.Add(1)
		}
		cancel()
		select {
		case <-ctx.Done():
		case <-ticker.C:
		}
		stop()
		// Shutdown waits for the informer's goroutines: the next one
		// starts with none of this one's left.
		factory.Shutdown()
	}
}

// TestRobustnessSoak: an hour (-robustness.duration) of mixed load on two
// regions and an in-memory group, with a fault every window; every
// window's history holds every promise, no 500, and no cache process
// leaks goroutines, file descriptors, memory or database beyond what its
// objects take.
func TestRobustnessSoak(t *testing.T) {
	if !*soak {
		t.Skip("the soak (two regions and a group of three in child processes, for -robustness.duration): run with -robustness.soak -robustness.duration=1h")
	}
	s := startSoak(t)
	window := soakWindow
	if *duration < 3*soakWindow {
		// A short run still has three windows: a leak check needs three
		// samples of a process.
		window = *duration / 3
	}
	t.Logf("soak: windows of %s for %s, a fault in each, samples after each", window, *duration)

	bgCtx, stopBackground := context.WithCancel(context.Background())
	var bg sync.WaitGroup
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			stopBackground()
			bg.Wait()
		}
	}
	// The growers and informers end before the caches do (t.Cleanup).
	defer stop()
	var growers []*grower
	for shard, cfg := range s.homes {
		cfg = rest.CopyConfig(cfg)
		cfg.Host += kcpcache.ScopedPathPrefix(kcpcache.Scope{Shard: shard, Cluster: growCluster})
		cfg.Wrap(s.background.Wrap)
		g := &grower{shard: shard, client: dynamicFor(t, cfg)}
		growers = append(growers, g)
		bg.Go(func() { g.run(bgCtx) })
	}
	var relisters []*relister
	for _, p := range s.procs {
		cfg := rest.CopyConfig(p.cfg)
		cfg.Host += kcpcache.ScopedPathPrefix(kcpcache.Scope{Shard: "*", Cluster: "*"})
		cfg.Wrap(s.background.Wrap)
		d, err := dynamic.NewForConfig(client.Unthrottled(cfg))
		if err != nil {
			t.Fatal(err)
		}
		r := &relister{name: p.name, client: d}
		relisters = append(relisters, r)
		bg.Go(func() { r.run(bgCtx) })
	}

	start := time.Now()
	sampleAll := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		for _, p := range s.procs {
			if err := p.take(ctx, time.Since(start)); err != nil {
				t.Error(err)
			}
		}
	}
	sampleAll()
	var total Report
	var faults []string
	// Windows start while one more fits in the duration (each also takes
	// its final reads, its check and the samples): the soak lasts about
	// as long as it was asked to.
	for w := 0; w < 3 || time.Since(start)+window <= *duration; w++ {
		s.keyPrefix = fmt.Sprintf("w%d-k", w)
		f := s.faultList[w%len(s.faultList)]
		rep := s.run(t, window, func(ctx context.Context, note func(string), n int) {
			if n == 0 {
				f(ctx, t, note)
			}
		})
		counts, internal := checkServerErrors(s.background.take())
		rep.ServerErrors = mergeCounts(rep.ServerErrors, counts)
		rep.Violations = append(rep.Violations, internal...)
		t.Logf("window %d (%s): %d operations (%d writes, %d of unknown outcome, %d consistent reads, %d at another cache), %d stale reads, %d watch events; 5xx: %s; %d violations; faults: %s",
			w, time.Since(start).Round(time.Second), rep.Operations, rep.Writes, rep.Unknown, rep.Reads, rep.MirrorReads, rep.StaleReads, rep.WatchEvents, formatCounts(rep.ServerErrors), len(rep.Violations), strings.Join(rep.Faults, "; "))
		for _, v := range rep.Violations {
			t.Logf("  window %d violation: %s", w, v)
		}
		faults = append(faults, rep.Faults...)
		total.add(rep, false, "")
		sampleAll()
	}
	stop()
	total.Faults = faults
	logReport(t, "soak", total)
	var created []string
	for _, g := range growers {
		created = append(created, fmt.Sprintf("%s: %d", g.shard, g.created.Load()))
	}
	t.Logf("objects that only grow, created: %s", strings.Join(created, ", "))
	for _, r := range relisters {
		t.Logf("informers on every partition of %s: %d synced, %d did not sync within a minute", r.name, r.synced.Load(), r.failed.Load())
	}
	var leaks []Violation
	for _, p := range s.procs {
		t.Logf("samples of %s\n%s", p.name, p.table())
		found, judged := judgeLeaks(p.name, p.samples)
		if judged == 0 {
			t.Errorf("no incarnation of %s had %d samples to judge", p.name, minLeakSamples)
		}
		leaks = append(leaks, found...)
	}
	for _, v := range leaks {
		t.Logf("  leak: %s", v)
	}
	if total.Writes == 0 || total.MirrorReads == 0 || total.WatchEvents == 0 || total.StaleReads == 0 {
		t.Fatalf("the soak did too little to check anything: %+v", total)
	}
	if n := len(total.Violations) + len(leaks); n > 0 {
		t.Errorf("%d violations (%d of them leaks)", n, len(leaks))
	}
}

// mergeCounts adds b's counts to a's.
func mergeCounts(a, b map[string]int) map[string]int {
	for k, n := range b {
		if a == nil {
			a = map[string]int{}
		}
		a[k] += n
	}
	return a
}
