package integration_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/client"
	"github.com/kcp-cache/kcp-cache/cache/hook"
	"github.com/kcp-cache/kcp-cache/cache/replication"
	"github.com/kcp-cache/kcp-cache/cache/server"
	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
)

// ownCode marks a goroutine as one the server (or its fixture) started:
// its stack, or the frame that created it, is in this project's server
// packages or in etcd (the embedded member, the etcd clients). Goroutines
// upstream keeps on its own (idle HTTP connections of client-go's shared
// transports, klog's flusher) are not counted.
var ownCode = []string{
	"github.com/kcp-cache/kcp-cache/cache/",
	"go.etcd.io/etcd/",
	// etcd clients' connections, which only etcd clients open here.
	"google.golang.org/grpc",
}

// goroutines returns the stacks of the running goroutines that run or were
// created by ownCode, by goroutine id.
func goroutines() map[string]string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	out := map[string]string{}
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		stack := string(g)
		header, _, _ := strings.Cut(stack, "\n")
		id, _, _ := strings.Cut(strings.TrimPrefix(header, "goroutine "), " ")
		for _, code := range ownCode {
			if strings.Contains(stack, code) {
				out[id] = stack
				break
			}
		}
	}
	return out
}

// leftOver polls until no goroutine of ownCode runs that did not run in
// before, and returns the stacks of those still running at the deadline.
func leftOver(before map[string]string, deadline time.Duration) []string {
	var left []string
	for end := time.Now().Add(deadline); ; time.Sleep(50 * time.Millisecond) {
		left = left[:0]
		for id, stack := range goroutines() {
			if _, ok := before[id]; !ok {
				left = append(left, stack)
			}
		}
		if len(left) == 0 || time.Now().After(end) {
			return left
		}
	}
}

// Every goroutine a server starts (its loops, storage, etcd clients, the
// embedded etcd, a mounted cache's host) has ended once Stop returns:
// Close awaits them, in the order it states. The test is not parallel, so
// that no other test's servers start goroutines meanwhile.
func TestStopLeavesNoGoroutineOfTheServerBehind(t *testing.T) {
	w := &hookWiring{}
	for _, tc := range []struct {
		name string
		opts cachetest.Options
	}{
		{"standalone", cachetest.Options{}},
		{"mounted in a host", cachetest.Options{Mounted: true, HostShard: "amber"}},
		{"mounted in a host with the replication hook", cachetest.Options{Mounted: true, HostShard: "amber", WireHost: w.wire}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := goroutines()
			ctx := klog.NewContext(testContext(t), klog.Background())
			srv, err := cachetest.Start(ctx, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			if tc.opts.WireHost != nil {
				// The hook runs, replicates and says so where kcp's
				// operators look: the host's /readyz/cache-replication.
				cachetest.Eventually(t, "the host's "+hook.StatusPath+" answers ok", func(ctx context.Context) error {
					return expectStatus(ctx, srv.HostConfig(), hook.StatusPath, http.StatusOK)
				})
			}
			started := 0
			for id := range goroutines() {
				if _, ok := before[id]; !ok {
					started++
				}
			}
			if started == 0 {
				t.Fatal("a running server shows no goroutine of its own: the accounting sees nothing")
			}
			stopping := time.Now()
			if err := srv.Stop(); err != nil {
				t.Fatalf("stopping: %v", err)
			}
			t.Logf("stopped in %s", time.Since(stopping).Round(time.Millisecond))
			if tc.opts.WireHost != nil {
				if !w.stopped {
					t.Fatal("the host's shutdown did not stop the replication hook")
				}
				if len(w.hookGoroutines) > 0 {
					t.Fatalf("%d goroutines of the hook or replication still ran after the hook's Stop:\n\n%s", len(w.hookGoroutines), strings.Join(w.hookGoroutines, "\n\n"))
				}
				if w.cacheAfterStop != nil {
					t.Fatalf("the mounted cache no longer answered once replication had stopped: it stopped first: %v", w.cacheAfterStop)
				}
			}
			if left := leftOver(before, 10*time.Second); len(left) > 0 {
				t.Fatalf("%d goroutines of the server still run after Stop:\n\n%s", len(left), strings.Join(left, "\n\n"))
			}
		})
	}
	// Peers add the mirror's streams, the homes table's polls and the
	// freshness checks: they end with their cache too.
	t.Run("two caches that mirror each other", func(t *testing.T) {
		before := goroutines()
		ctx := klog.NewContext(testContext(t), klog.Background())
		regions := cachetest.StartRegions(t, ctx, cachetest.RegionsOptions{}, "east", "west")
		east, west := regions["east"].Srv, regions["west"].Srv
		atEast := cachetest.Dynamic(t, east.ShardConfig(t, "shard-east"), kcpcache.ScopedPathPrefix(kcpcache.Scope{Shard: "shard-east", Cluster: "root"}))
		if _, err := atEast.Resource(apiExports).Create(ctx, apiExport("mirrored", nil), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		atWest := cachetest.Dynamic(t, west.Config(), kcpcache.ScopedPathPrefix(kcpcache.Scope{Shard: "shard-east", Cluster: "root"}))
		cachetest.Eventually(t, "west mirrors shard-east's object", func(ctx context.Context) error {
			_, err := atWest.Resource(apiExports).Get(ctx, "mirrored", metav1.GetOptions{})
			return err
		})
		mirrorRuns := false
		for id, stack := range goroutines() {
			if _, ok := before[id]; !ok && strings.Contains(stack, "kcp-cache/cache/server/mirror.") {
				mirrorRuns = true
			}
		}
		if !mirrorRuns {
			t.Fatal("no goroutine of the mirror runs while the caches mirror each other: the accounting sees nothing")
		}
		for _, srv := range []*cachetest.Server{west, east} {
			if err := srv.Stop(); err != nil {
				t.Fatalf("stopping: %v", err)
			}
		}
		if left := leftOver(before, 10*time.Second); len(left) > 0 {
			t.Fatalf("%d goroutines of the caches still run after Stop:\n\n%s", len(left), strings.Join(left, "\n\n"))
		}
	})
}

// hookWiring installs the replication hook in a host as kcp wires it (see
// hack/kcp/kcp-run-cache-server.sh): the host's shard's own objects read
// through its /clusters/ paths, replicated into the mounted cache with the
// host's shard identity, hook.Install for the post-start and pre-shutdown
// hooks and the status path.
type hookWiring struct {
	stopped bool
	// hookGoroutines are the stacks of the goroutines of the hook and the
	// replication controller that still ran once the hook's Stop had
	// returned.
	hookGoroutines []string
	// cacheAfterStop is what the mounted cache's /readyz answered through
	// the host once replication had stopped: nil when it answered 200.
	cacheAfterStop error
}

func (w *hookWiring) wire(host, mounted *server.Server) ([]func(), error) {
	shard := cachetest.DefaultHostShard
	localClient, err := client.NewForConfigWithPaths(host.AdminConfig(), func(scope kcpcache.Scope) string {
		return "/" + kcpcache.ClustersSegment + "/" + scope.Cluster
	})
	if err != nil {
		return nil, err
	}
	local := client.NewInformerFactory(localClient, kcpcache.Scope{Shard: shard, Cluster: kcpcache.Wildcard}, 0)
	h, err := hook.New(hook.Config{
		Shard:        shard,
		CacheConfig:  mounted.HostShardConfig(),
		LocalSources: replication.FactorySources(local),
	})
	if err != nil {
		return nil, err
	}
	if err := h.Install(host.GenericAPIServer); err != nil {
		return nil, err
	}
	if err := host.GenericAPIServer.AddPostStartHook("test-local-informers", func(ctx genericapiserver.PostStartHookContext) error {
		local.Start(ctx)
		return nil
	}); err != nil {
		return nil, err
	}
	hostAdmin := host.AdminConfig()
	return []func(){
		func() {
			h.Stop()
			w.stopped = true
			for _, stack := range goroutines() {
				for _, code := range []string{"kcp-cache/cache/hook.", "kcp-cache/cache/replication."} {
					if strings.Contains(stack, code) {
						w.hookGoroutines = append(w.hookGoroutines, stack)
						break
					}
				}
			}
		},
		local.Shutdown,
		func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			w.cacheAfterStop = expectStatus(ctx, hostAdmin, kcpcache.ServicePrefix+"/readyz", http.StatusOK)
		},
	}, nil
}

// expectStatus GETs path from cfg's server and wants code.
func expectStatus(ctx context.Context, cfg *rest.Config, path string, code int) error {
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return err
	}
	defer hc.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, cfg.Host+path, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != code {
		return fmt.Errorf("GET %s: %d %s, want %d", path, resp.StatusCode, bytes.TrimSpace(body), code)
	}
	return nil
}
