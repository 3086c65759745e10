package hook_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/client"
	"github.com/kcp-cache/kcp-cache/cache/hook"
	"github.com/kcp-cache/kcp-cache/cache/replication"
	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
)

// A host that already runs wildcard informers over the cache (kcp runs one
// per type) hands them to the hook: the hook becomes healthy and replicates
// on them, and its own client never lists or watches those types.
func TestHookRunsOnTheHostsCacheInformers(t *testing.T) {
	w := newWorld(t)
	const shard = "umber"
	w.createLocal(t, shard, "root", "before-start", map[string]interface{}{"v": "1"})

	// The host's informers: every kcp type and the replicated ones, over
	// every shard and cluster.
	hostClient := clusterClient(t, w.cache.ShardConfig(t, shard))
	hostFactory := client.NewInformerFactory(hostClient, kcpcache.Scope{}, 0)
	provided := map[string]bool{}
	for _, typ := range kcpcache.KcpTypes() {
		hostFactory.ForResource(typ.GVR())
		provided[typ.Resource] = true
	}
	hostFactory.ForResource(exportsGVR) // the tests' local objects are v1alpha1 apiexports
	hostInformers := func(gvr schema.GroupVersionResource) cache.SharedIndexInformer { return hostFactory.ForResource(gvr) }

	// Record what the hook's own client reads.
	var mu sync.Mutex
	var reads []string
	cacheConfig := w.cache.ShardConfig(t, shard)
	cacheConfig.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return cachetest.RoundTripperFunc(func(req *http.Request) (*http.Response, error) {
			if req.Method == http.MethodGet {
				mu.Lock()
				reads = append(reads, req.URL.Path)
				mu.Unlock()
			}
			return rt.RoundTrip(req)
		})
	})
	h := w.runHook(t, hook.Config{
		Shard:             shard,
		CacheConfig:       cacheConfig,
		CacheInformers:    hostInformers,
		HeartbeatInterval: heartbeatInterval,
	}, hostFactory)

	cachetest.Eventually(t, "the hook healthy on the host's informers", func(context.Context) error {
		if reason, msg, _ := h.Status().Get(); reason != "" {
			return fmt.Errorf("degraded: %s: %s", reason, msg)
		}
		return nil
	})
	w.createLocal(t, shard, "root", "after-start", map[string]interface{}{"v": "2"})
	cachetest.Eventually(t, "both objects replicated", func(ctx context.Context) error {
		for _, name := range []string{"before-start", "after-start"} {
			if _, err := w.consumer.Cluster(shard, "root").Resource(exportsGVR).Get(ctx, name, metav1.GetOptions{}); err != nil {
				return err
			}
		}
		return nil
	})

	mu.Lock()
	defer mu.Unlock()
	for _, path := range reads {
		segments := strings.Split(path, "/")
		if resource := segments[len(segments)-1]; provided[resource] {
			t.Errorf("the hook's own client read %s, which the host's informers cover", path)
		}
	}
}

// The heartbeat says "converged" as soon as the shard is, not one interval
// later: with a renewal interval far beyond the test's deadline, the
// partition is still seen converged and confirmed.
func TestHeartbeatReportsConvergenceWithoutWaitingForTheInterval(t *testing.T) {
	w := newWorld(t)
	const shard = "sepia"
	w.createLocal(t, shard, "root", "first", map[string]interface{}{"v": "1"})
	w.runHook(t, hook.Config{
		Shard:             shard,
		CacheConfig:       w.cache.ShardConfig(t, shard),
		HeartbeatInterval: 10 * time.Minute,
	})
	if f := w.confirmed(t, shard); f.Objects != 1 {
		t.Errorf("converged heartbeat reports %d objects, want 1", f.Objects)
	}
}

// runHook runs a hook for cfg.Shard that replicates the shard's v1alpha1
// apiexports from the stand-in server, until the test ends; it starts and
// stops the given informer factories with it.
func (w *world) runHook(t *testing.T, cfg hook.Config, factories ...*client.InformerFactory) *hook.Hook {
	t.Helper()
	local := client.NewInformerFactory(w.localAdmin, kcpcache.Scope{Shard: cfg.Shard, Cluster: kcpcache.Wildcard}, 0)
	cfg.LocalSources = replication.FactorySources(local)
	cfg.Resources = []replication.Resource{{GVR: exportsGVR, Kind: "APIExport"}}
	cfg.ProbeInterval = heartbeatInterval
	h, err := hook.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	factories = append(factories, local)
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), ktesting.NewLogger(t, ktesting.NewConfig())))
	done := make(chan struct{})
	t.Cleanup(func() {
		cancel()
		<-done
		for _, f := range factories {
			f.Shutdown()
		}
	})
	for _, f := range factories {
		f.Start(ctx)
	}
	go func() {
		defer close(done)
		h.Run(ctx)
	}()
	return h
}
