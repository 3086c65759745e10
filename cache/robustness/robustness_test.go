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

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/client"
	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
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
	// mirrors are caches in regions that mirror srv (nil for one cache).
	mirrors []*cachetest.Server
}

func startOneCache(t *testing.T) *oneCache {
	t.Helper()
	return behindProxy(t, cachetest.StartServer(t))
}

// startRegions is the regions shape: two caches in a full mesh, the
// shard homed at a, the writers reading from a and b at random (a
// consistent read at b is confirmed with a).
func startRegions(t *testing.T) *oneCache {
	t.Helper()
	ctx, cancel := context.WithTimeout(klog.NewContext(context.Background(), klog.Background()), 2*cachetest.DefaultTimeout)
	defer cancel()
	regions := cachetest.StartRegions(t, ctx, cachetest.RegionsOptions{}, "a", "b")
	c := behindProxy(t, regions["a"].Srv)
	b := regions["b"].Srv
	cfg := b.Config()
	cfg.Host += kcpcache.ScopedPathPrefix(kcpcache.Scope{Shard: "s", Cluster: "root"})
	cfg = client.Unthrottled(cfg)
	d, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c.readers = []dynamic.ResourceInterface{c.client, d.Resource(Resource)}
	c.mirrors = []*cachetest.Server{b}
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

// faults of the one-cache shape, in turn: the cache restarts on its data
// (clients see refused connections and lost answers), etcd compacts its
// history (resumed watches get 410 Gone).
func (c *oneCache) faults(t *testing.T) func(ctx context.Context, rec *Recorder, n int) {
	return func(ctx context.Context, rec *Recorder, n int) {
		restart := func(what string, srv *cachetest.Server) {
			rec.Fault("restart of " + what)
			rctx, cancel := context.WithTimeout(klog.NewContext(context.Background(), klog.Background()), cachetest.DefaultTimeout)
			defer cancel()
			if err := srv.Restart(rctx); err != nil {
				t.Errorf("restarting %s: %v", what, err)
			}
		}
		kinds := 2 // a restart of the cache, a compaction
		if len(c.mirrors) > 0 {
			kinds = 3 // a restart of the mirror, of the home, a compaction
		}
		switch k := n % kinds; {
		case kinds == 3 && k == 0:
			restart("the mirror", c.mirrors[0])
		case k == kinds-2 && len(c.mirrors) > 0:
			restart("the home", c.srv)
		case k == kinds-2:
			restart("the cache server", c.srv)
		default:
			resp, err := c.srv.EtcdClient().Get(ctx, "/", nil...)
			if err != nil {
				return
			}
			rec.Fault(fmt.Sprintf("etcd compaction at revision %d", resp.Header.Revision))
			if _, err := c.srv.EtcdClient().Compact(ctx, resp.Header.Revision); err != nil {
				t.Logf("compaction: %v", err)
			}
		}
	}
}

func logReport(t *testing.T, shape string, rep Report) {
	t.Helper()
	t.Logf("%s: %d operations (%d writes, %d of unknown outcome, %d consistent reads, %d of them at a mirror), %d watch events, faults: %v",
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
