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
	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
)

var (
	duration = flag.Duration("robustness.duration", 8*time.Second, "how long traffic runs per cluster shape (the long run: 10m)")
	faultGap = flag.Duration("robustness.fault-interval", 3*time.Second, "time between injected faults")
	saveDir  = flag.String("robustness.save-dir", "", "where a failing history is saved as JSON (default: the test's temporary directory, printed)")
	replay   = flag.String("robustness.history", "", "a saved history for TestCheckSavedHistory to check again")
)

// oneCache is the cluster shape of one cache server on its embedded etcd,
// with the clients behind a proxy that can inject seeded faults.
type oneCache struct {
	srv    *cachetest.Server
	proxy  *Proxy
	client dynamic.ResourceInterface
}

func startOneCache(t *testing.T) *oneCache {
	t.Helper()
	srv := cachetest.StartServer(t)
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
	cfg := &rest.Config{Host: proxy.URL + kcpcache.ScopedPathPrefix(kcpcache.Scope{Shard: "s", Cluster: "root"}), QPS: -1}
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
	tr := Traffic{Writers: 3, Keys: 4, Rec: rec}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	watchCtx, stopWatch := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var events []WatchEvent
	wg.Go(func() { events = Watch(watchCtx, c.client) })
	if inject != nil {
		wg.Go(func() {
			ticker := time.NewTicker(*faultGap)
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
		switch n % 2 {
		case 0:
			rec.Fault("restart of the cache server")
			rctx, cancel := context.WithTimeout(klog.NewContext(context.Background(), klog.Background()), cachetest.DefaultTimeout)
			defer cancel()
			if err := c.srv.Restart(rctx); err != nil {
				t.Errorf("restarting the cache: %v", err)
			}
		case 1:
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
	t.Logf("%s: %d operations (%d writes, %d of unknown outcome, %d consistent reads), %d watch events, faults: %v",
		shape, rep.Operations, rep.Writes, rep.Unknown, rep.Reads, rep.WatchEvents, rep.Faults)
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
	c := startOneCache(t)
	rep := c.run(t, *duration, c.faults(t))
	logReport(t, "one cache", rep)
	if rep.Writes == 0 || rep.Reads == 0 || rep.WatchEvents == 0 {
		t.Fatalf("the run did too little to check anything: %+v", rep)
	}
	if len(rep.Violations) > 0 {
		t.Errorf("%d violations", len(rep.Violations))
	}
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
