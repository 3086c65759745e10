package replication

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/component-base/metrics/testutil"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/client"
	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
)

var clusters = []string{"root", "org", "team"}

// The controller mirrors each shard's objects into its partition and keeps
// them there, through edits in the cache, outages and other shards. Every
// scenario runs against one cache server and one server standing in for
// the shards; each uses its own shard names, so they share nothing but the
// servers.
func TestControllerKeepsEachShardsCopiesInItsPartition(t *testing.T) {
	if testing.Short() {
		t.Skip("long scenario (several shards converging): skipped with -short")
	}
	h := newHarness(t)
	t.Run("converges same names across clusters", func(t *testing.T) { testConverges(t, h) })
	t.Run("repairs copies edited or deleted in the cache", func(t *testing.T) { testRepairs(t, h) })
	t.Run("origin went back in time", func(t *testing.T) { testOriginWentBack(t, h) })
	t.Run("extra resources and filters", func(t *testing.T) { testExtraResourcesAndFilters(t, h) })
	t.Run("shards do not interfere", func(t *testing.T) { testShardsDoNotInterfere(t, h) })
	t.Run("with the host's wildcard cache informers", func(t *testing.T) { testHostCacheInformers(t, h) })
	t.Run("origin shard down", func(t *testing.T) { testOriginShardDown(t, h) })
	t.Run("cache outage", func(t *testing.T) { testCacheOutage(t, h) })
}

func testConverges(t *testing.T, h *harness) {
	s := newShard(t, h, "amber")
	// Objects that exist before the controller starts, same names everywhere.
	for _, c := range clusters {
		mustCreate(t, s.localClient(c, exportsGVR), export("shared", "in-"+c))
		mustCreate(t, s.localClient(c, exportsGVR), export("only-"+c, c))
		mustCreate(t, s.localClient(c, schemasGVR), object(schemasGVR, "APIResourceSchema", "", "shared", map[string]interface{}{"group": c}))
	}
	mustCreate(t, s.localClient("system:admin", exportsGVR), export("shared", "system"))
	before := readMetrics(t)
	s.start(t)
	s.waitMirrored(t)
	if _, err := s.cacheClient("system:admin", exportsGVR).Get(context.Background(), "shared", metav1.GetOptions{}); err == nil {
		t.Errorf("an object in a system cluster was replicated")
	}
	untouched, err := s.cacheClient("root", exportsGVR).Get(context.Background(), "only-root", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// Changes while it runs: create, update spec and status, delete, and
	// replace an object by a new one of the same name (a new UID).
	mustCreate(t, s.localClient("org", exportsGVR), export("late", "org"))
	mustMutate(t, s.localClient("org", exportsGVR), "shared", func(u *unstructured.Unstructured) {
		_ = unstructured.SetNestedField(u.Object, "changed", "spec", "value")
	})
	mustMutate(t, s.localClient("root", exportsGVR), "shared", func(u *unstructured.Unstructured) {
		_ = unstructured.SetNestedField(u.Object, "Ready", "status", "phase")
	})
	mustDelete(t, s.localClient("team", exportsGVR), "only-team")
	mustDelete(t, s.localClient("team", schemasGVR), "shared")
	mustCreate(t, s.localClient("team", schemasGVR), object(schemasGVR, "APIResourceSchema", "", "shared", map[string]interface{}{"group": "reborn"}))
	s.waitMirrored(t)

	after, err := s.cacheClient("root", exportsGVR).Get(context.Background(), "only-root", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if after.GetResourceVersion() != untouched.GetResourceVersion() {
		t.Errorf("a copy whose origin did not change was rewritten")
	}
	checkMetrics(t, before, readMetrics(t))
}

// exportMetrics are the controller's process-global metrics for apiexports.
type exportMetrics struct {
	reconciles map[string]float64 // by result
	lags       uint64
}

func readMetrics(t *testing.T) exportMetrics {
	t.Helper()
	m := exportMetrics{reconciles: map[string]float64{}}
	for _, result := range []string{"created", "updated", "deleted", "unchanged"} {
		v, err := testutil.GetCounterMetricValue(reconcilesTotal.WithLabelValues("apiexports.apis.kcp.io", result))
		if err != nil {
			t.Fatal(err)
		}
		m.reconciles[result] = v
	}
	n, err := testutil.GetHistogramMetricCount(lagSeconds.WithLabelValues("apiexports.apis.kcp.io"))
	if err != nil {
		t.Fatal(err)
	}
	m.lags = n
	return m
}

// checkMetrics checks that the controller's metrics are registered and that
// this scenario moved them. They are process-global and other tests move
// them too, so only growth between before and after says anything.
func checkMetrics(t *testing.T, before, after exportMetrics) {
	t.Helper()
	for result, v := range after.reconciles {
		if v <= before.reconciles[result] {
			t.Errorf("no %s reconciles counted (%v before, %v after)", result, before.reconciles[result], v)
		}
	}
	if after.lags <= before.lags {
		t.Errorf("no lag measured (%d observations before, %d after)", before.lags, after.lags)
	}
	if v, _ := testutil.GetGaugeMetricValue(objectsGauge.WithLabelValues("apiexports.apis.kcp.io")); v < 6 {
		t.Errorf("objects gauge = %v, want at least the 6 export copies", v)
	}
	families, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	registered := map[string]bool{}
	for _, f := range families {
		registered[f.GetName()] = true
	}
	for _, name := range []string{
		"kcp_cache_replication_reconciles_total", "kcp_cache_replication_lag_seconds", "kcp_cache_replication_objects",
		"kcp_cache_replication_workqueue_depth", "kcp_cache_replication_workqueue_adds_total",
	} {
		if !registered[name] {
			t.Errorf("metric %s is not exported", name)
		}
	}
}

func testRepairs(t *testing.T, h *harness) {
	s := newShard(t, h, "beige")
	for _, name := range []string{"a", "b", "c"} {
		mustCreate(t, s.localClient("root", exportsGVR), export(name, name))
	}
	created := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	owned := export("owned", "x")
	owned.SetManagedFields([]metav1.ManagedFieldsEntry{ownership("kubectl-edit", created, `{"f:spec":{".":{},"f:value":{}}}`)})
	mustCreate(t, s.localClient("root", exportsGVR), owned)
	s.start(t)
	s.waitMirrored(t)

	// Each tampering lands (the write succeeds), and is then reverted.
	mustMutate(t, s.cacheClient("root", exportsGVR), "a", func(u *unstructured.Unstructured) {
		_ = unstructured.SetNestedField(u.Object, "evil", "spec", "value")
	})
	mustMutate(t, s.cacheClient("root", exportsGVR), "b", func(u *unstructured.Unstructured) {
		u.SetGeneration(99)
		u.SetLabels(map[string]string{"evil": "yes"})
	})
	mustDelete(t, s.cacheClient("root", exportsGVR), "c")
	mustMutate(t, s.cacheClient("root", exportsGVR), "owned", func(u *unstructured.Unstructured) {
		u.SetManagedFields(append(u.GetManagedFields(), ownership("intruder", created, `{"f:spec":{"f:extra":{}}}`)))
	})
	stray := export("stray", "nobody's")
	stray.SetAnnotations(map[string]string{kcpcache.AnnotationShard: "beige"})
	mustCreate(t, s.cacheClient("root", exportsGVR), stray)
	mustCreate(t, s.cacheClient("elsewhere", exportsGVR), export("stray", "nobody's"))
	s.waitMirrored(t)

	// A change of field ownership alone on the shard reaches the copy.
	mustMutate(t, s.localClient("root", exportsGVR), "owned", func(u *unstructured.Unstructured) {
		u.SetManagedFields([]metav1.ManagedFieldsEntry{ownership("kubectl-edit", created, `{"f:spec":{".":{}}}`), ownership("scaler", created.Add(time.Minute), `{"f:spec":{"f:value":{}}}`)})
	})
	s.waitMirrored(t)
	// And so does its loss.
	mustMutate(t, s.localClient("root", exportsGVR), "owned", func(u *unstructured.Unstructured) {
		_ = unstructured.SetNestedSlice(u.Object, []interface{}{}, "metadata", "managedFields")
	})
	s.waitMirrored(t)
}

// A shard restored from a backup holds an object older than its copy: the
// copy records a newer origin resourceVersion and a higher generation. The
// controller mirrors the shard's object anyway, lowering the copy's
// generation, in one write: kcp's fork refused such an update (422), which
// the controller would have retried forever.
func testOriginWentBack(t *testing.T, h *harness) {
	s := newShard(t, h, "ivory")
	restored := export("restored", "before")
	restored.SetGeneration(5)
	restored = mustCreate(t, s.localClient("root", exportsGVR), restored)
	s.start(t)
	s.waitMirrored(t)

	// Read before the copy changes: the controller reconciles on the
	// cache's event as well as on the queue, and may count the regression
	// before this test's own queue entry.
	regressions := s.ctrl.Status().OriginRegressions
	// What the copy would be had the shard been further along before its
	// restore: a later spec, generation and origin resourceVersion.
	mustMutate(t, s.cacheClient("root", exportsGVR), "restored", func(u *unstructured.Unstructured) {
		_ = unstructured.SetNestedField(u.Object, "after", "spec", "value")
		u.SetGeneration(9)
		a := u.GetAnnotations()
		a[kcpcache.AnnotationOriginalResourceVersion] = "999999999"
		u.SetAnnotations(a)
	})
	s.ctrl.queue.Add(Key{GVR: exportsGVR, Cluster: "root", Name: "restored"})
	s.waitMirrored(t)
	c, err := s.cacheClient("root", exportsGVR).Get(context.Background(), "restored", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c.GetGeneration() != restored.GetGeneration() {
		t.Errorf("copy generation %d, want the restored origin's %d", c.GetGeneration(), restored.GetGeneration())
	}
	if got := s.ctrl.Status().OriginRegressions; got <= regressions {
		t.Errorf("no origin regression counted (%d before, %d after)", regressions, got)
	}
	if n := s.ctrl.queue.NumRequeues(Key{GVR: exportsGVR, Cluster: "root", Name: "restored"}); n != 0 {
		t.Errorf("the copy converged after %d retries, want none", n)
	}
}

func testExtraResourcesAndFilters(t *testing.T, h *harness) {
	h.cache.InstallCRD(t, cachetest.WidgetNames)
	h.local.InstallCRD(t, cachetest.WidgetNames)
	labelled := func(u *unstructured.Unstructured) bool { return u.GetLabels()["replicate"] == "yes" }
	withWidgets := func(cfg *Config, _ *rest.Config) {
		cfg.Resources = append(DefaultResources(), Resource{GVR: widgetsGVR, Kind: "Widget", Filter: labelled})
	}
	s := newShard(t, h, "gold", withWidgets)
	widget := func(ns, name string, replicate bool) *unstructured.Unstructured {
		u := object(widgetsGVR, "Widget", ns, name, map[string]interface{}{"size": int64(len(name))})
		if replicate {
			u.SetLabels(map[string]string{"replicate": "yes"})
		}
		return u
	}
	for _, c := range []string{"root", "org"} {
		for _, ns := range []string{"default", "other"} {
			mustCreate(t, s.localClient(c, widgetsGVR).Namespace(ns), widget(ns, "w", true))
			mustCreate(t, s.localClient(c, widgetsGVR).Namespace(ns), widget(ns, "private", false))
		}
	}
	s.start(t)
	s.waitMirrored(t)
	if _, err := s.cacheClient("root", widgetsGVR).Namespace("default").Get(context.Background(), "private", metav1.GetOptions{}); err == nil {
		t.Fatalf("a widget the filter rejects was replicated")
	}

	mustMutate(t, s.localClient("org", widgetsGVR).Namespace("other"), "w", func(u *unstructured.Unstructured) { u.SetLabels(nil) })
	mustMutate(t, s.localClient("root", widgetsGVR).Namespace("other"), "private", func(u *unstructured.Unstructured) {
		u.SetLabels(map[string]string{"replicate": "yes"})
	})
	s.waitMirrored(t)
}

func testShardsDoNotInterfere(t *testing.T, h *harness) {
	dune, ecru := newShard(t, h, "dune"), newShard(t, h, "ecru")
	for _, s := range []*shard{dune, ecru} {
		for _, c := range clusters {
			mustCreate(t, s.localClient(c, exportsGVR), export("shared", s.name+"-"+c))
		}
		s.start(t)
	}
	dune.waitMirrored(t)
	ecru.waitMirrored(t)
	before := copiesOf(t, ecru)

	for _, c := range clusters {
		mustMutate(t, dune.localClient(c, exportsGVR), "shared", func(u *unstructured.Unstructured) {
			_ = unstructured.SetNestedField(u.Object, "dune-changed", "spec", "value")
		})
	}
	mustDelete(t, dune.localClient("root", exportsGVR), "shared")
	dune.waitMirrored(t)
	dune.stop()
	ecru.waitMirrored(t)
	if after := copiesOf(t, ecru); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("ecru's copies changed while only dune's objects did: before %v, after %v", before, after)
	}
}

// testHostCacheInformers runs a controller on informers over every shard
// that its host already runs (as kcp's global informers are): it opens no
// list or watch of its own, converges and repairs its partition, and leaves
// another shard's copies of the same names alone.
func testHostCacheInformers(t *testing.T, h *harness) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	global := client.NewInformerFactory(h.cacheAdmin, kcpcache.Scope{Shard: kcpcache.Wildcard, Cluster: kcpcache.Wildcard}, 0)
	var reads atomic.Int32
	hostInformers := func(cfg *Config, cacheCfg *rest.Config) {
		cfg.CacheInformers = func(gvr schema.GroupVersionResource) cache.SharedIndexInformer { return global.ForResource(gvr) }
		cacheCfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
			return cachetest.RoundTripperFunc(func(req *http.Request) (*http.Response, error) {
				if req.Method == http.MethodGet {
					reads.Add(1)
				}
				return rt.RoundTrip(req)
			})
		})
	}
	fawn, gray := newShard(t, h, "fawn", hostInformers), newShard(t, h, "gray")
	for _, s := range []*shard{fawn, gray} {
		for _, c := range clusters {
			mustCreate(t, s.localClient(c, exportsGVR), export("shared", s.name+"-"+c))
		}
	}
	global.Start(ctx)
	fawn.start(t)
	gray.start(t)
	fawn.waitMirrored(t)
	gray.waitMirrored(t)
	before := copiesOf(t, gray)

	mustMutate(t, fawn.cacheClient("root", exportsGVR), "shared", func(u *unstructured.Unstructured) {
		_ = unstructured.SetNestedField(u.Object, "evil", "spec", "value")
	})
	mustDelete(t, fawn.cacheClient("org", exportsGVR), "shared")
	mustDelete(t, fawn.localClient("team", exportsGVR), "shared")
	fawn.waitMirrored(t)
	gray.waitMirrored(t)
	if after := copiesOf(t, gray); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("gray's copies changed while only fawn's partition did: before %v, after %v", before, after)
	}
	if n := reads.Load(); n != 0 {
		t.Errorf("the controller on host informers read the cache itself %d times", n)
	}
}

// copiesOf returns placement → resourceVersion of a shard's export copies.
func copiesOf(t *testing.T, s *shard) map[string]string {
	t.Helper()
	list, err := s.h.cacheAdmin.Cluster(s.name, kcpcache.Wildcard).Resource(exportsGVR).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for i := range list.Items {
		out[placement(&list.Items[i])] = list.Items[i].GetResourceVersion()
	}
	return out
}

func testOriginShardDown(t *testing.T, h *harness) {
	s := newShard(t, h, "fern")
	for _, c := range clusters {
		mustCreate(t, s.localClient(c, exportsGVR), export("keep", c))
		mustCreate(t, s.localClient(c, exportsGVR), export("doomed", c))
	}
	s.start(t)
	s.waitMirrored(t)
	s.stop()
	before := copiesOf(t, s)

	// While the shard is down: its copies stay, and other shards read them
	// through the wildcard as usual.
	list, err := h.cacheAdmin.Cluster(kcpcache.Wildcard, "org").Resource(exportsGVR).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, u := range list.Items {
		if u.GetAnnotations()[kcpcache.AnnotationShard] == "fern" {
			found++
		}
	}
	if found != 2 {
		t.Errorf("a consumer reading */org sees %d of fern's 2 copies there while fern is down", found)
	}
	if after := copiesOf(t, s); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("stopping the controller changed its copies: before %v, after %v", before, after)
	}

	// The shard changes while its controller is down; the restarted
	// controller's first pass removes what vanished meanwhile.
	for _, c := range clusters {
		mustDelete(t, s.localClient(c, exportsGVR), "doomed")
	}
	mustMutate(t, s.localClient("root", exportsGVR), "keep", func(u *unstructured.Unstructured) {
		_ = unstructured.SetNestedField(u.Object, "changed while down", "spec", "value")
	})
	mustCreate(t, s.localClient("team", exportsGVR), export("born-while-down", "team"))
	s.restart(t)
	// The restarted controller never saw "doomed" locally: only its first
	// full pass over the cache side can delete those copies. (Polling rather
	// than checking at InitialSyncDone: the informers' first lists are served
	// from the servers' watch caches, which may trail the last writes by a
	// moment, and the watch then delivers the rest.)
	s.waitMirrored(t)
}

func testCacheOutage(t *testing.T, h *harness) {
	o := &outage{}
	s := newShard(t, h, "cyan", withOutage(o))
	for _, c := range clusters {
		mustCreate(t, s.localClient(c, exportsGVR), export("stable", c))
		mustCreate(t, s.localClient(c, exportsGVR), export("changing", c))
		mustCreate(t, s.localClient(c, exportsGVR), export("doomed", c))
	}
	s.start(t)
	s.waitMirrored(t)
	errorsBefore, _ := testutil.GetCounterMetricValue(reconcilesTotal.WithLabelValues("apiexports.apis.kcp.io", "error"))

	// The cache goes away for the controller: its connections break and
	// every request fails. The server restarts meanwhile, so the controller's
	// cache informer must relist from a new server when the cache is back.
	o.down.Store(true)
	o.cut()
	h.cache.RestartServer(t)
	for _, c := range clusters {
		mustCreate(t, s.localClient(c, exportsGVR), export("born-during-outage", c))
		mustMutate(t, s.localClient(c, exportsGVR), "changing", func(u *unstructured.Unstructured) {
			_ = unstructured.SetNestedField(u.Object, "changed during outage", "spec", "value")
		})
		mustDelete(t, s.localClient(c, exportsGVR), "doomed")
	}
	cachetest.Eventually(t, "the controller tries and fails to write", func(context.Context) error {
		if n := o.refusedWrites.Load(); n < 9 {
			return fmt.Errorf("%d writes refused so far", n)
		}
		return nil
	})
	if err := s.mirrorDiff(context.Background()); err == nil {
		t.Fatalf("the partition converged although the cache was unreachable: the outage is not simulated")
	}
	o.down.Store(false)
	s.waitMirrored(t)
	if errorsAfter, _ := testutil.GetCounterMetricValue(reconcilesTotal.WithLabelValues("apiexports.apis.kcp.io", "error")); errorsAfter <= errorsBefore {
		t.Errorf("failed reconciles during the outage were not counted")
	}
}
