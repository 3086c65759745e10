package robustness

import (
	"context"
	"flag"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/client"
	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
	"github.com/kcp-cache/kcp-cache/cache/server/embeddedetcd/etcdtest"
)

var (
	duration = flag.Duration("robustness.duration", 8*time.Second, "how long traffic runs per cluster shape (the long run: 10m)")
	faultGap = flag.Duration("robustness.fault-interval", 3*time.Second, "time between injected faults")
	saveDir  = flag.String("robustness.save-dir", "", "where a failing history is saved as JSON (default: the test's temporary directory, printed)")
	replay   = flag.String("robustness.history", "", "a saved history for TestCheckSavedHistory to check again")
)

// oneCache is a cluster shape: the shard's home cache on its embedded etcd,
// written and watched through a proxy that can inject seeded faults, and
// the caches the writers read from (the home alone, or the home and its
// mirrors).
type oneCache struct {
	srv     *cachetest.Server
	proxy   *Proxy
	client  dynamic.ResourceInterface
	readers []dynamic.ResourceInterface
	// faultList are the shape's faults, injected in turn.
	faultList []fault
}

func startOneCache(t *testing.T) *oneCache {
	t.Helper()
	c := behindProxy(t, cachetest.StartServer(t))
	c.faultList = []fault{restartOf("the cache server", c.srv), compactionOf(c.srv.EtcdClient)}
	return c
}

// startExternalEtcd is the scaled-out shape: two cache servers storing in
// one external etcd cluster of three members, the writers going through
// the first and reading from either at random (a consistent read at the
// second holds every write the first acknowledged, as both read the same
// etcd). Faults: a member's crash and its return, a restart of the first
// cache, a compaction.
func startExternalEtcd(t *testing.T) *oneCache {
	t.Helper()
	const members = 3
	cluster := cachetest.StartEtcdCluster(t, members)
	c := behindProxy(t, cachetest.StartServer(t, cachetest.WithFlags(cluster.Flags)))
	c.readers = []dynamic.ResourceInterface{c.client, scopedReader(t, cachetest.StartServer(t, cachetest.WithFlags(cluster.Flags)))}
	etcd := cluster.Client(t)
	kill, restart := memberFaults(cluster, members)
	c.faultList = []fault{kill, restart, restartOf("the first cache server", c.srv), compactionOf(func() *clientv3.Client { return etcd })}
	return c
}

// startMemoryGroup is the in-memory group shape: three --storage=memory
// servers of one group, the writers going through m0 and reading from any
// member at random (a consistent read at any member is a quorum read of
// the group). Faults: each member in turn restarts, its memory gone, and
// refills from its peers; a compaction.
func startMemoryGroup(t *testing.T) *oneCache {
	t.Helper()
	servers, clientURLs := cachetest.StartMemoryGroup(t, 3)
	c := behindProxy(t, servers[0])
	c.readers = []dynamic.ResourceInterface{c.client, scopedReader(t, servers[1]), scopedReader(t, servers[2])}
	tlsConfig, err := servers[0].Server().EmbeddedEtcdTLS().ClientTLSConfig()
	if err != nil {
		t.Fatal(err)
	}
	etcd := etcdtest.Dial(t, tlsConfig, clientURLs...)
	// As an operator's rolling restart does, a member restarts only once
	// the group is whole again: a group of three with two members not in
	// service has no majority, and an in-memory group without one has lost
	// its data by design.
	rolling := func(name string, srv *cachetest.Server) fault {
		restart := restartOf(name+" (its memory lost)", srv)
		return func(ctx context.Context, t *testing.T, rec *Recorder) {
			if err := groupWhole(ctx, etcd, clientURLs); err != nil {
				rec.Fault(fmt.Sprintf("restart of %s skipped: the group is not whole: %v", name, err))
				return
			}
			restart(ctx, t, rec)
		}
	}
	c.faultList = []fault{
		rolling("member m1", servers[1]),
		rolling("member m2", servers[2]),
		rolling("member m0, written through", servers[0]),
		compactionOf(func() *clientv3.Client { return etcd }),
	}
	return c
}

// groupWhole polls, for up to a minute, until every member of the group is
// started and answers for itself with the same leader and a raft index
// within 100 entries of the leader's.
func groupWhole(ctx context.Context, etcd *clientv3.Client, clientURLs []string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var last error
	for {
		last = func() error {
			members, err := etcd.MemberList(ctx)
			if err != nil {
				return err
			}
			if len(members.Members) != len(clientURLs) {
				return fmt.Errorf("%d members, want %d", len(members.Members), len(clientURLs))
			}
			for _, m := range members.Members {
				if m.Name == "" {
					return fmt.Errorf("member %x has not started", m.ID)
				}
			}
			var leader, top uint64
			indexes := map[string]uint64{}
			for _, u := range clientURLs {
				st, err := etcd.Status(ctx, u)
				if err != nil {
					return fmt.Errorf("status of %s: %w", u, err)
				}
				if leader != 0 && st.Leader != leader {
					return fmt.Errorf("members disagree on the leader")
				}
				leader = st.Leader
				indexes[u] = st.RaftIndex
				top = max(top, st.RaftIndex)
			}
			for u, i := range indexes {
				if top-i > 100 {
					return fmt.Errorf("%s is %d entries behind", u, top-i)
				}
			}
			return nil
		}()
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return last
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// scopedReader reads shard s's partition at srv as its admin.
func scopedReader(t *testing.T, srv *cachetest.Server) dynamic.ResourceInterface {
	t.Helper()
	cfg := srv.Config()
	cfg.Host += kcpcache.ScopedPathPrefix(kcpcache.Scope{Shard: "s", Cluster: "root"})
	d, err := dynamic.NewForConfig(client.Unthrottled(cfg))
	if err != nil {
		t.Fatal(err)
	}
	return d.Resource(Resource)
}

// startRegions is the regions shape: two caches in a full mesh, the
// shard homed at a, the writers reading from a and b at random (a
// consistent read at b is confirmed with a). Faults: restarts of either
// cache, the link from b to a cut and restored, a compaction at a.
func startRegions(t *testing.T) *oneCache {
	t.Helper()
	ctx, cancel := context.WithTimeout(klog.NewContext(context.Background(), klog.Background()), 2*cachetest.DefaultTimeout)
	defer cancel()
	// The mirror b reaches its home a through a link the faults cut.
	link := cachetest.NewLinkCutter()
	via := func(from, to, host string) string {
		if from == "b" && to == "a" {
			return link.Via(t, host)
		}
		return host
	}
	regions := cachetest.StartRegions(t, ctx, cachetest.RegionsOptions{Via: via}, "a", "b")
	c := behindProxy(t, regions["a"].Srv)
	b := regions["b"].Srv
	c.readers = []dynamic.ResourceInterface{c.client, scopedReader(t, b)}
	cut := func(_ context.Context, _ *testing.T, rec *Recorder) {
		rec.Fault("link from the mirror to its home cut")
		link.Cut()
	}
	restore := func(_ context.Context, _ *testing.T, rec *Recorder) {
		rec.Fault("link from the mirror to its home restored")
		link.Restore()
	}
	c.faultList = []fault{restartOf("the mirror", b), cut, restartOf("the home", c.srv), restore, compactionOf(c.srv.EtcdClient)}
	return c
}

// behindProxy puts a proxy with shard s's identity in front of srv.
func behindProxy(t *testing.T, srv *cachetest.Server) *oneCache {
	t.Helper()
	shard := srv.ShardConfig(t, "s")
	transport, err := rest.TransportFor(shard)
	if err != nil {
		t.Fatal(err)
	}
	target, err := url.Parse(shard.Host)
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := NewProxy(target, transport)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	cfg := &rest.Config{Host: proxy.URL + kcpcache.ScopedPathPrefix(kcpcache.Scope{Shard: "s", Cluster: "root"})}
	cfg = client.Unthrottled(cfg)
	d, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &oneCache{srv: srv, proxy: proxy, client: d.Resource(Resource)}
}

// run sends traffic and watches for d while inject (if any) injects faults
// every faultGap, then reads every key once more and checks the history.
func (c *oneCache) run(t *testing.T, d time.Duration, inject func(ctx context.Context, rec *Recorder, n int)) Report {
	t.Helper()
	rec := NewRecorder()
	tr := Traffic{Writers: 3, Keys: 4, Readers: c.readers, Rec: rec}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	watchCtx, stopWatch := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var events []WatchEvent
	wg.Go(func() { events = Watch(watchCtx, c.client) })
	if inject != nil {
		wg.Go(func() {
			gap := *faultGap
			if testing.Short() && gap > 2*time.Second {
				gap = 2 * time.Second
			}
			ticker := time.NewTicker(gap)
			defer ticker.Stop()
			for n := 0; ; n++ {
				select {
				case <-ctx.Done():
					return
				case <-ticker.C:
					inject(ctx, rec, n)
				}
			}
		})
	}
	tr.Run(ctx, c.client)
	finalCtx, cancelFinal := context.WithTimeout(context.Background(), time.Minute)
	defer cancelFinal()
	if err := tr.GetAll(finalCtx, c.client); err != nil {
		// The watcher and a fault still under way end first: they
		// report to t, which must not have ended.
		stopWatch()
		wg.Wait()
		t.Fatal(err)
	}
	stopWatch()
	wg.Wait()
	rec.AddWatch(events)
	h := rec.History()
	rep := Check(h, time.Minute)
	if len(rep.Violations) > 0 {
		dir := *saveDir
		if dir == "" {
			dir = t.TempDir()
		}
		path := filepath.Join(dir, strings.ReplaceAll(t.Name(), "/", "_")+".json")
		if err := h.Save(path); err == nil {
			t.Logf("history saved to %s (check it again: go test ./cache/robustness -run TestCheckSavedHistory -robustness.history=%s)", path, path)
		}
	}
	return rep
}

// fault injects one failure while traffic runs and records it.
type fault func(ctx context.Context, t *testing.T, rec *Recorder)

// faults injects the shape's faults in turn.
func (c *oneCache) faults(t *testing.T) func(ctx context.Context, rec *Recorder, n int) {
	return func(ctx context.Context, rec *Recorder, n int) {
		c.faultList[n%len(c.faultList)](ctx, t, rec)
	}
}

// restartOf restarts a cache server on its data: clients see refused
// connections and lost answers, watches end.
func restartOf(what string, srv *cachetest.Server) fault {
	return func(_ context.Context, t *testing.T, rec *Recorder) {
		rec.Fault("restart of " + what)
		rctx, cancel := context.WithTimeout(klog.NewContext(context.Background(), klog.Background()), cachetest.DefaultTimeout)
		defer cancel()
		if err := srv.Restart(rctx); err != nil {
			t.Errorf("restarting %s: %v", what, err)
		}
	}
}

// compactionOf compacts the etcd that etcdClient returns a client of at
// its current revision: resumed watches from before it get 410 Gone.
func compactionOf(etcdClient func() *clientv3.Client) fault {
	return func(ctx context.Context, t *testing.T, rec *Recorder) {
		cli := etcdClient()
		resp, err := cli.Get(ctx, "/", nil...)
		if err != nil {
			return
		}
		rec.Fault(fmt.Sprintf("etcd compaction at revision %d", resp.Header.Revision))
		if _, err := cli.Compact(ctx, resp.Header.Revision); err != nil {
			t.Logf("compaction: %v", err)
		}
	}
}

// memberFaults kill one member of cluster at a time, as a crash would (the
// next member each time), and start it again on its data: the cluster
// keeps its majority throughout, and a leader's crash makes it elect
// another.
func memberFaults(cluster *cachetest.EtcdCluster, members int) (kill, restart fault) {
	var next, killed int
	kill = func(_ context.Context, _ *testing.T, rec *Recorder) {
		killed = next % members
		next++
		rec.Fault(fmt.Sprintf("SIGKILL of etcd member %d", killed))
		cluster.Kill(killed)
	}
	restart = func(_ context.Context, t *testing.T, rec *Recorder) {
		rec.Fault(fmt.Sprintf("restart of etcd member %d on its data", killed))
		rctx, cancel := context.WithTimeout(klog.NewContext(context.Background(), klog.Background()), cachetest.DefaultTimeout)
		defer cancel()
		if err := cluster.Restart(rctx, killed); err != nil {
			t.Errorf("restarting etcd member %d: %v", killed, err)
		}
	}
	return kill, restart
}

func logReport(t *testing.T, shape string, rep Report) {
	t.Helper()
	t.Logf("%s: %d operations (%d writes, %d of unknown outcome, %d consistent reads, %d of them at another cache), %d watch events, faults: %v",
		shape, rep.Operations, rep.Writes, rep.Unknown, rep.Reads, rep.MirrorReads, rep.WatchEvents, rep.Faults)
	for _, e := range rep.UnknownErrors {
		t.Logf("  a write of unknown outcome: %s", e)
	}
	for _, v := range rep.Violations {
		t.Logf("  violation: %s", v)
	}
}

// TestRobustness: traffic against one cache while it restarts and etcd
// compacts; the history holds every promise.
func TestRobustness(t *testing.T) {
	runShape(t, "one cache", startOneCache(t), func(rep Report) int { return rep.Reads })
}

// runShape runs traffic and faults against c for the run's duration and
// checks the history; reads counts the reads the shape must have made.
func runShape(t *testing.T, shape string, c *oneCache, reads func(Report) int) {
	t.Helper()
	d := *duration
	if testing.Short() && d > 5*time.Second {
		// The quick path: a shorter run, still with a restart and a
		// compaction in it (faults every 2 s at most).
		d = 5 * time.Second
	}
	rep := c.run(t, d, c.faults(t))
	logReport(t, shape, rep)
	if rep.Writes == 0 || reads(rep) == 0 || rep.WatchEvents == 0 {
		t.Fatalf("the run did too little to check anything: %+v", rep)
	}
	if len(rep.Violations) > 0 {
		t.Errorf("%d violations", len(rep.Violations))
	}
}

// TestRobustnessRegions: traffic against a home and its mirror while each
// restarts and the home's etcd compacts: a consistent read at the mirror
// is linearizable with the home's writes, and the home's watch holds every
// promise.
func TestRobustnessRegions(t *testing.T) {
	if testing.Short() {
		t.Skip("long scenario (two caches in regions): skipped with -short")
	}
	runShape(t, "regions", startRegions(t), func(rep Report) int { return rep.MirrorReads })
}

// TestRobustnessMemoryGroup: traffic against an in-memory group of three
// while each member restarts in turn, its memory gone, and etcd compacts;
// reads at any member are linearizable with the writes through m0.
func TestRobustnessMemoryGroup(t *testing.T) {
	if testing.Short() {
		t.Skip("long scenario (a group of three in-memory servers): skipped with -short")
	}
	runShape(t, "memory group", startMemoryGroup(t), func(rep Report) int { return rep.MirrorReads })
}

// TestRobustnessExternalEtcd: traffic against two caches on one external
// etcd cluster of three while its members crash and return in turn, the
// first cache restarts and etcd compacts; reads at either cache are
// linearizable with the writes through the first.
func TestRobustnessExternalEtcd(t *testing.T) {
	if testing.Short() {
		t.Skip("long scenario (three etcd members, two caches): skipped with -short")
	}
	runShape(t, "external etcd", startExternalEtcd(t), func(rep Report) int { return rep.Reads })
}

// TestSeededFaultsAreCaught: each deliberate bug is named by the check it
// breaks; with none switched on, the same traffic holds every promise.
func TestSeededFaultsAreCaught(t *testing.T) {
	for _, tc := range []struct {
		fault SeededFault
		check string
	}{
		{"", ""},
		{StaleConsistentRead, "linearizability"},
		{WatchSkipsAnEvent, "watch-gap"},
		{WatchReordersEvents, "watch-order"},
	} {
		name := string(tc.fault)
		if name == "" {
			name = "none"
		}
		t.Run(name, func(t *testing.T) {
			// Each case has its own cache; they run side by side.
			t.Parallel()
			c := startOneCache(t)
			c.proxy.Enable(tc.fault)
			rep := c.run(t, 4*time.Second, nil)
			logReport(t, name, rep)
			var checks []string
			for _, v := range rep.Violations {
				checks = append(checks, v.Check)
			}
			switch {
			case tc.check == "" && len(checks) > 0:
				t.Errorf("violations without a seeded fault: %v", rep.Violations)
			case tc.check != "" && !slices.Contains(checks, tc.check):
				t.Errorf("seeded fault %s: violations %v, want one of %s", tc.fault, checks, tc.check)
			}
		})
	}
}

// TestCheckSavedHistory checks a saved history again, alone.
func TestCheckSavedHistory(t *testing.T) {
	if *replay == "" {
		t.Skip("no -robustness.history to check")
	}
	h, err := LoadHistory(*replay)
	if err != nil {
		t.Fatal(err)
	}
	rep := Check(h, time.Minute)
	logReport(t, *replay, rep)
	if len(rep.Violations) > 0 {
		t.Errorf("%d violations", len(rep.Violations))
	}
}

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(m.Run())
}
