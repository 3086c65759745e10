package shardserver_test

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"reflect"
	"sort"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/hook"
	"github.com/kcp-cache/kcp-cache/cache/options"
	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
	"github.com/kcp-cache/kcp-cache/examples/internal/run"
	"github.com/kcp-cache/kcp-cache/examples/shard/shardserver"
)

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func startShard(t *testing.T, name string, customize func(*shardserver.Options)) *run.Shard {
	t.Helper()
	s, err := run.StartShard(testContext(t), filepath.Join(t.TempDir(), name), name, customize)
	if err != nil {
		t.Fatalf("starting shard %s: %v", name, err)
	}
	cachetest.StopOnCleanup(t, "shard "+name, s.Stop)
	return s
}

func startCache(t *testing.T, root string, port int, flags func(*options.Options)) *cachetest.Server {
	t.Helper()
	c, err := run.Cache(testContext(t), root, port, flags)
	if err != nil {
		t.Fatalf("starting the cache: %v", err)
	}
	cachetest.StopOnCleanup(t, "the cache server", c.Stop)
	return c
}

func scoped(t *testing.T, cfg *rest.Config, prefix string) dynamic.Interface {
	return cachetest.Dynamic(t, cfg, prefix)
}

func cacheScope(shard, cluster string) string {
	return kcpcache.ScopedPathPrefix(kcpcache.Scope{Shard: shard, Cluster: cluster})
}

func object(kind, name string, spec map[string]interface{}) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": "apis.kcp.io/v1alpha1",
		"kind":       kind,
		"metadata":   map[string]interface{}{"name": name},
		"spec":       spec,
	}}
}

// copies lists the APIExports in a cache scope as "shard/cluster/name".
func copies(ctx context.Context, c dynamic.Interface) ([]string, error) {
	list, err := c.Resource(shardserver.APIExports).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, u := range list.Items {
		a := u.GetAnnotations()
		out = append(out, a[kcpcache.AnnotationShard]+"/"+a[kcpcache.AnnotationCluster]+"/"+u.GetName())
	}
	sort.Strings(out)
	return out, nil
}

func expectCopies(ctx context.Context, c dynamic.Interface, want ...string) error {
	got, err := copies(ctx, c)
	if err != nil {
		return err
	}
	if !reflect.DeepEqual(got, want) {
		return fmt.Errorf("cache holds %v, want %v", got, want)
	}
	return nil
}

func expectCode(ctx context.Context, cfg *rest.Config, path string, want int) error {
	code, err := run.Get(ctx, cfg, path)
	if err != nil {
		return err
	}
	if code != want {
		return fmt.Errorf("%s answered %d, want %d", path, code, want)
	}
	return nil
}

// A shard with --run-cache-server serves its own objects and the cache on
// its one port, and replicates into that cache.
func TestShardServesItsAPIsAndTheCacheOnOnePort(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	alpha := startShard(t, "alpha", func(o *shardserver.Options) { o.Cache.RunCacheServer = true })

	own := scoped(t, alpha.Config, "/clusters/root")
	if _, err := own.Resource(shardserver.APIExports).Create(ctx, object("APIExport", "payments", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cache := scoped(t, alpha.Config, cacheScope("*", "*"))
	cachetest.Eventually(t, "the cache holds exactly alpha/root/payments", func(context.Context) error { return expectCopies(ctx, cache, "alpha/root/payments") })
	local, err := own.Resource(shardserver.APIExports).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("listing the shard's own API: %v", err)
	}
	if len(local.Items) != 1 {
		t.Fatalf("the shard's own API holds %d objects, want 1", len(local.Items))
	}
	for _, p := range kcpcache.HealthPaths {
		if err := expectCode(ctx, alpha.Config, p, http.StatusOK); err != nil {
			t.Error(err)
		}
	}
	cachetest.Eventually(t, "the hook reports healthy", func(context.Context) error { return expectCode(ctx, alpha.Config, hook.StatusPath, http.StatusOK) })
}

// Two shards push same-named objects into one cache (served in-process by
// the first), each into its own partition.
func TestTwoShardsPushToOneCache(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	alpha := startShard(t, "alpha", func(o *shardserver.Options) { o.Cache.RunCacheServer = true })
	beta := startShard(t, "beta", func(o *shardserver.Options) { o.Cache.CacheKubeconfig = alpha.CacheKubeconfig() })
	for _, s := range []*run.Shard{alpha, beta} {
		if _, err := scoped(t, s.Config, "/clusters/root").Resource(shardserver.APIExports).Create(ctx, object("APIExport", "same", nil), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	cache := scoped(t, alpha.Config, cacheScope("*", "*"))
	cachetest.Eventually(t, "the cache holds exactly alpha/root/same, beta/root/same", func(context.Context) error { return expectCopies(ctx, cache, "alpha/root/same", "beta/root/same") })

	if err := scoped(t, beta.Config, "/clusters/root").Resource(shardserver.APIExports).Delete(ctx, "same", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	cachetest.Eventually(t, "the cache holds exactly alpha/root/same", func(context.Context) error { return expectCopies(ctx, cache, "alpha/root/same") })
}

// A shard whose cache is down at start is ready (its own API works) and
// degraded; once the cache is up it recovers and converges, losing nothing.
func TestShardStartedWithTheCacheDownIsReadyDegradedThenConverges(t *testing.T) {
	if testing.Short() {
		t.Skip("long scenario (a shard waits for a cache that starts late): skipped with -short")
	}
	t.Parallel()
	ctx := testContext(t)
	cacheRoot := t.TempDir()
	first := startCache(t, cacheRoot, 0, nil)
	port := first.Options().Port
	kubeconfig := first.Kubeconfig()
	if err := first.Stop(); err != nil {
		t.Fatal(err)
	}

	beta := startShard(t, "beta", func(o *shardserver.Options) { o.Cache.CacheKubeconfig = kubeconfig })
	if err := expectCode(ctx, beta.Config, "/readyz", http.StatusOK); err != nil {
		t.Fatal(err)
	}
	cachetest.Eventually(t, "the hook reports the cache unreachable", func(context.Context) error {
		reason, _, _ := beta.Shard.Hook().Status().Get()
		if reason != hook.ReasonCacheUnreachable {
			return fmt.Errorf("degraded reason %q, want %q", reason, hook.ReasonCacheUnreachable)
		}
		return expectCode(ctx, beta.Config, hook.StatusPath, http.StatusServiceUnavailable)
	})
	own := scoped(t, beta.Config, "/clusters/root")
	for _, name := range []string{"a", "b", "c"} {
		if _, err := own.Resource(shardserver.APIExports).Create(ctx, object("APIExport", name, nil), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := own.Resource(shardserver.APIExports).Delete(ctx, "c", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, p := range kcpcache.HealthPaths {
		if err := expectCode(ctx, beta.Config, p, http.StatusOK); err != nil {
			t.Errorf("while the cache is down: %v", err)
		}
	}

	second := startCache(t, cacheRoot, port, nil)
	cache := scoped(t, second.Config(), cacheScope("*", "*"))
	cachetest.Eventually(t, "the cache holds exactly beta/root/a, beta/root/b", func(context.Context) error { return expectCopies(ctx, cache, "beta/root/a", "beta/root/b") })
	cachetest.Eventually(t, "the hook reports healthy", func(context.Context) error { return expectCode(ctx, beta.Config, hook.StatusPath, http.StatusOK) })
}

// With the origin shard gone, another shard still resolves its exports
// from the cache (read-only availability, the point of the cache). Each
// shard uses the cache with its own identity, not the admin token: its
// replication controller writes its partition, its global informers and
// the hook's probe read through */* and /readyz.
func TestFallbackLookupsSurviveTheOriginShard(t *testing.T) {
	if testing.Short() {
		t.Skip("long scenario (two shards, one stopped): skipped with -short")
	}
	t.Parallel()
	ctx := testContext(t)
	ids, err := run.NewIdentities(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cache := startCache(t, t.TempDir(), 0, ids.TrustedBy)
	use := func(shard string) func(o *shardserver.Options) {
		kubeconfig, err := ids.ShardKubeconfig(cache, shard)
		if err != nil {
			t.Fatal(err)
		}
		return func(o *shardserver.Options) { o.Cache.CacheKubeconfig = kubeconfig }
	}
	alpha := startShard(t, "alpha", use("alpha"))
	beta := startShard(t, "beta", use("beta"))
	for _, s := range []*run.Shard{alpha, beta} {
		cachetest.Eventually(t, "the shard's use of the cache is healthy", func(ctx context.Context) error {
			return expectCode(ctx, s.Config, hook.StatusPath, http.StatusOK)
		})
	}

	export, err := scoped(t, alpha.Config, "/clusters/payments").Resource(shardserver.APIExports).Create(ctx, object("APIExport", "payments", nil), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	bindings := scoped(t, beta.Config, "/clusters/shop").Resource(shardserver.APIBindings)
	bind := func(name string) {
		t.Helper()
		b := object("APIBinding", name, map[string]interface{}{"reference": map[string]interface{}{"export": map[string]interface{}{"cluster": "payments", "name": "payments"}}})
		if _, err := bindings.Create(ctx, b, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		cachetest.Eventually(t, "binding "+name+" is bound to alpha's export from the cache", func(context.Context) error {
			got, err := bindings.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			status, _, _ := unstructured.NestedMap(got.Object, "status")
			shard, _, _ := unstructured.NestedString(status, "export", "shard")
			uid, _, _ := unstructured.NestedString(status, "export", "uid")
			if status["phase"] != "Bound" || status["source"] != "cache" || shard != "alpha" || uid != string(export.GetUID()) {
				return fmt.Errorf("binding %s status %v", name, status)
			}
			return nil
		})
	}
	bind("before")
	if err := alpha.Stop(); err != nil {
		t.Fatalf("stopping shard alpha: %v", err)
	}
	if _, err := run.Get(ctx, alpha.Config, "/readyz"); err == nil {
		t.Fatal("shard alpha still answers")
	}
	bind("after")
}
