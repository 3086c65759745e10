package replication

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/component-base/metrics/testutil"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/client"
)

// offlineController returns a controller whose clients point nowhere; tests
// swap its dependencies and drive processNextItem by hand.
func offlineController(t *testing.T, shard string) *Controller {
	t.Helper()
	cc, err := client.NewForConfig(&rest.Config{Host: "https://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewController(&Config{
		Shard:        shard,
		CacheClient:  cc,
		LocalSources: FactorySources(client.NewInformerFactory(cc, kcpcache.Scope{Shard: shard, Cluster: kcpcache.Wildcard}, 0)),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.queue.ShutDown)
	return c
}

// writes records what a controller sent to the cache.
type writes struct{ calls []string }

func (w *writes) install(c *Controller, createErr, updateErr, deleteErr func() error) {
	c.createCopy = func(_ context.Context, k Key, _ *unstructured.Unstructured) error {
		w.calls = append(w.calls, "create "+k.Name)
		return call(createErr)
	}
	c.updateCopy = func(_ context.Context, k Key, _ *unstructured.Unstructured) error {
		w.calls = append(w.calls, "update "+k.Name)
		return call(updateErr)
	}
	c.deleteCopy = func(_ context.Context, k Key, uid types.UID) error {
		w.calls = append(w.calls, "delete "+k.Name+" if "+string(uid))
		return call(deleteErr)
	}
}

func call(f func() error) error {
	if f == nil {
		return nil
	}
	return f()
}

var exportsGVR = schema.GroupVersionResource{Group: "apis.kcp.io", Version: "v1alpha2", Resource: "apiexports"}

func exportKey() Key { return Key{GVR: exportsGVR, Cluster: "root", Name: "export"} }

func counter(t *testing.T, result string) float64 {
	t.Helper()
	v, err := testutil.GetCounterMetricValue(reconcilesTotal.WithLabelValues("apiexports.apis.kcp.io", result))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestLookupErrorsAreRetried(t *testing.T) {
	c := offlineController(t, "amber")
	var w writes
	w.install(c, nil, nil, nil)
	failures := 2
	c.getLocal = func(Key) (*unstructured.Unstructured, error) {
		if failures > 0 {
			failures--
			return nil, errors.New("local informer unavailable")
		}
		return localExport(), nil
	}
	c.getCopy = func(Key) (*unstructured.Unstructured, error) { return nil, nil }
	errorsBefore := counter(t, "error")

	c.queue.Add(exportKey())
	for i := 0; i < 3; i++ {
		c.processNextItem(context.Background()) // blocks until the backoff put the key back
	}
	if got := strings.Join(w.calls, ","); got != "create export" {
		t.Fatalf("writes = %q, want one create after two failed lookups", got)
	}
	if got := counter(t, "error") - errorsBefore; got != 2 {
		t.Errorf("error reconciles = %v, want 2", got)
	}
	if n := c.queue.NumRequeues(exportKey()); n != 0 {
		t.Errorf("a success must reset the backoff, NumRequeues = %d", n)
	}
}

func TestConflictsAreRetriedAndLagSpansTheRetries(t *testing.T) {
	c := offlineController(t, "amber")
	clock := time.Unix(1000, 0)
	c.now = func() time.Time { return clock }
	var lags []time.Duration
	c.observeLag = func(_ schema.GroupVersionResource, d time.Duration) { lags = append(lags, d) }
	var w writes
	conflicts := 1
	w.install(c, nil, func() error {
		clock = clock.Add(time.Second)
		if conflicts > 0 {
			conflicts--
			return apierrors.NewConflict(exportsGVR.GroupResource(), "export", errors.New("stale"))
		}
		return nil
	}, nil)
	c.getLocal = func(Key) (*unstructured.Unstructured, error) { return localExport(withSpec("replicas", int64(7))), nil }
	c.getCopy = func(Key) (*unstructured.Unstructured, error) { return cachedCopy(), nil }

	c.lag.observed(exportKey(), clock)
	c.queue.Add(exportKey())
	c.processNextItem(context.Background())
	if c.lag.pending() != 1 {
		t.Fatalf("a failed write must keep the change pending")
	}
	c.processNextItem(context.Background())
	if got := strings.Join(w.calls, ","); got != "update export,update export" {
		t.Fatalf("writes = %q", got)
	}
	if len(lags) != 1 || lags[0] != 2*time.Second {
		t.Fatalf("lags = %v, want one of 2s measured from the first observation", lags)
	}
}

func TestRecreateDeletesThenCreates(t *testing.T) {
	c := offlineController(t, "amber")
	var w writes
	w.install(c, nil, nil, func() error { return apierrors.NewNotFound(exportsGVR.GroupResource(), "export") })
	c.getLocal = func(Key) (*unstructured.Unstructured, error) {
		return localExport(func(u *unstructured.Unstructured) { u.SetUID("uid-2") }), nil
	}
	c.getCopy = func(Key) (*unstructured.Unstructured, error) { return cachedCopy(), nil }
	act, err := c.reconcile(context.Background(), exportKey())
	if err != nil || act != actionRecreate {
		t.Fatalf("reconcile = %s, %v", act, err)
	}
	if got := strings.Join(w.calls, ","); got != "delete export if uid-1,create export" {
		t.Fatalf("writes = %q", got)
	}
}

func TestDeletingAMissingCopySucceeds(t *testing.T) {
	c := offlineController(t, "amber")
	var w writes
	w.install(c, nil, nil, func() error { return apierrors.NewNotFound(exportsGVR.GroupResource(), "export") })
	c.getLocal = func(Key) (*unstructured.Unstructured, error) { return nil, nil }
	c.getCopy = func(Key) (*unstructured.Unstructured, error) { return cachedCopy(), nil }
	if act, err := c.reconcile(context.Background(), exportKey()); err != nil || act != actionDelete {
		t.Fatalf("reconcile = %s, %v", act, err)
	}
}

// A local object is selected for replication unless it is in a system
// cluster (unless asked for) or the filter rejects it; a missing one is
// nothing to replicate, not an error.
func TestSelectionSkipsSystemClustersAndFilteredObjects(t *testing.T) {
	c := offlineController(t, "amber")
	local := localExport()
	c.resources[exportsGVR].source.Get = func(string, string, string) (runtime.Object, error) { return local, nil }
	if got, err := c.getLocalFromSource(Key{GVR: exportsGVR, Cluster: "system:admin", Name: "export"}); err != nil || got != nil {
		t.Errorf("objects in system clusters must not be selected by default, got %v, %v", got, err)
	}
	c.replicateSystemClusters = true
	if got, _ := c.getLocalFromSource(Key{GVR: exportsGVR, Cluster: "system:admin", Name: "export"}); got == nil {
		t.Errorf("ReplicateSystemClusters must select system clusters")
	}
	c.resources[exportsGVR].Filter = func(u *unstructured.Unstructured) bool { return u.GetLabels()["team"] == "b" }
	if got, _ := c.getLocalFromSource(exportKey()); got != nil {
		t.Errorf("an object the filter rejects must not be selected")
	}
	c.resources[exportsGVR].source.Get = func(string, string, string) (runtime.Object, error) {
		return nil, apierrors.NewNotFound(exportsGVR.GroupResource(), "export")
	}
	if got, err := c.getLocalFromSource(exportKey()); err != nil || got != nil {
		t.Errorf("a missing object is nil without an error, got %v, %v", got, err)
	}
}

func TestNewControllerValidates(t *testing.T) {
	cc, err := client.NewForConfig(&rest.Config{Host: "https://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	sources := FactorySources(client.NewInformerFactory(cc, kcpcache.Scope{}, 0))
	gvr := schema.GroupVersionResource{Group: "g", Version: "v1", Resource: "things"}
	for name, cfg := range map[string]*Config{
		"no shard":           {CacheClient: cc, LocalSources: sources},
		"invalid shard":      {Shard: "Amber", CacheClient: cc, LocalSources: sources},
		"no cache client":    {Shard: "amber", LocalSources: sources},
		"no sources":         {Shard: "amber", CacheClient: cc},
		"duplicate resource": {Shard: "amber", CacheClient: cc, LocalSources: sources, Resources: []Resource{{GVR: gvr}, {GVR: gvr}}},
		"resource without version": {Shard: "amber", CacheClient: cc, LocalSources: sources,
			Resources: []Resource{{GVR: schema.GroupVersionResource{Resource: "things"}}}},
	} {
		if _, err := NewController(cfg); err == nil {
			t.Errorf("%s: NewController succeeded", name)
		}
	}
	failing := func(schema.GroupVersionResource) (LocalSource, error) { return LocalSource{}, nil }
	if _, err := NewController(&Config{Shard: "amber", CacheClient: cc, LocalSources: failing}); err == nil {
		t.Errorf("a source without informer must be refused")
	}
}

func TestKeyString(t *testing.T) {
	k := Key{GVR: schema.GroupVersionResource{Group: "example.dev", Version: "v1", Resource: "widgets"}, Cluster: "root", Namespace: "ns", Name: "w"}
	if got, want := k.String(), "v1.widgets.example.dev::root|ns/w"; got != want {
		t.Errorf("String() = %q, want kcp's form %q", got, want)
	}
}

func TestKeyForNeedsTheClusterAnnotation(t *testing.T) {
	u := localExport()
	k, err := keyFor(exportsGVR, u)
	if err != nil || k != exportKey() {
		t.Fatalf("keyFor = %v, %v", k, err)
	}
	u.SetAnnotations(nil)
	if _, err := keyFor(exportsGVR, u); err == nil {
		t.Errorf("an object without %s has no key", kcpcache.AnnotationCluster)
	}
}

func TestEchoOfOwnWriteIsRecognisedOnce(t *testing.T) {
	e := newEchoes()
	e.wrote(exportKey(), "10")
	if e.isEcho(exportKey(), "11") {
		t.Fatal("an event at another resourceVersion is not an echo")
	}
	if e.isEcho(exportKey(), "10") {
		t.Fatal("the expectation must be consumed by the first event for the key")
	}
	e.wrote(exportKey(), "12")
	if !e.isEcho(exportKey(), "12") || e.isEcho(exportKey(), "12") {
		t.Fatal("an echo is recognised exactly once")
	}
	if e.isEcho(Key{GVR: exportsGVR, Cluster: "org", Name: "export"}, "12") {
		t.Fatal("expectations are per key")
	}
}
