package client_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/client"
	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
)

var (
	shards   = []string{"amber", "beige", "cyan"}
	clusters = []string{"root", "org"}
)

const exportName = "shared"

// pathOf is the kcp.io/path of a test object; unique per shard and cluster,
// as a workspace path is.
func pathOf(shard, cluster string) string { return "root:" + shard + "-" + cluster }

func newAPIExport(name, path string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": "apis.kcp.io/v1alpha1",
		"kind":       "APIExport",
		"metadata":   map[string]interface{}{"name": name},
		"spec":       map[string]interface{}{"identity": map[string]interface{}{"secretRef": "x"}},
	}}
	if path != "" {
		u.SetAnnotations(map[string]string{kcpcache.AnnotationPath: path})
	}
	return u
}

// seedExports creates the same-named export in every shard × cluster.
func seedExports(t *testing.T, ctx context.Context, cc *client.ClusterClient) []string {
	t.Helper()
	var keys []string
	for _, s := range shards {
		for _, c := range clusters {
			if _, err := cc.Cluster(s, c).Resource(apiExportsGVR).Create(ctx, newAPIExport(exportName, pathOf(s, c)), metav1.CreateOptions{}); err != nil {
				t.Fatalf("creating in %s/%s: %v", s, c, err)
			}
			keys = append(keys, client.ToKey(s, c, "", exportName))
		}
	}
	sort.Strings(keys)
	return keys
}

func startFactory(t *testing.T, cc *client.ClusterClient) (*client.InformerFactory, *client.Informer) {
	t.Helper()
	factory := client.NewInformerFactory(cc, kcpcache.Scope{}, 0)
	inf := factory.ForResource(apiExportsGVR)
	return factory, inf
}

func run(t *testing.T, factory *client.InformerFactory) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() {
		cancel()
		factory.Shutdown()
	})
	factory.Start(ctx)
	syncCtx, syncCancel := context.WithTimeout(ctx, timeout)
	defer syncCancel()
	for gvr, ok := range factory.WaitForCacheSync(syncCtx) {
		if !ok {
			t.Fatalf("informer for %s did not sync", gvr)
		}
	}
}

// waitForKeys waits until the store holds exactly want. Synced is not enough:
// the first list has resourceVersion=0 and may come from a watch cache that
// lags the latest writes; the watch then delivers the rest.
func waitForKeys(t *testing.T, inf *client.Informer, want []string) {
	t.Helper()
	cachetest.Eventually(t, "store keys", func(context.Context) error {
		if got := storeKeys(inf); !slices.Equal(got, want) {
			return fmt.Errorf("store keys %v, want %v", got, want)
		}
		return nil
	})
}

func storeKeys(inf *client.Informer) []string {
	keys := inf.GetIndexer().ListKeys()
	sort.Strings(keys)
	return keys
}

// viewHandler keeps the set of objects its events describe and records any
// event that contradicts that set, such as a second add for one key.
type viewHandler struct {
	mu         sync.Mutex
	objs       map[string]*unstructured.Unstructured
	violations []string
}

func newViewHandler() *viewHandler {
	return &viewHandler{objs: map[string]*unstructured.Unstructured{}}
}

func (h *viewHandler) OnAdd(obj interface{}, _ bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	k := keyOf(obj)
	if _, ok := h.objs[k]; ok {
		h.violations = append(h.violations, "second add of "+k)
	}
	h.objs[k] = obj.(*unstructured.Unstructured)
}

func (h *viewHandler) OnUpdate(_, obj interface{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	k := keyOf(obj)
	if _, ok := h.objs[k]; !ok {
		h.violations = append(h.violations, "update of unknown "+k)
	}
	h.objs[k] = obj.(*unstructured.Unstructured)
}

func (h *viewHandler) OnDelete(obj interface{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	k := keyOf(obj)
	if _, ok := h.objs[k]; !ok {
		h.violations = append(h.violations, "delete of unknown "+k)
	}
	delete(h.objs, k)
}

// check compares the handler's view with want (key → label "v", "" for none).
func (h *viewHandler) check(want map[string]string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.violations) > 0 {
		return fmt.Errorf("inconsistent events: %v", h.violations)
	}
	return compareObjects(h.objs, want)
}

func compareObjects(got map[string]*unstructured.Unstructured, want map[string]string) error {
	if len(got) != len(want) {
		keys := make([]string, 0, len(got))
		for k := range got {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		return fmt.Errorf("%d objects %v, want %d", len(got), keys, len(want))
	}
	for k, v := range want {
		o, ok := got[k]
		if !ok {
			return fmt.Errorf("missing %s", k)
		}
		if l := o.GetLabels()["v"]; l != v {
			return fmt.Errorf("%s has label v=%q, want %q", k, l, v)
		}
	}
	return nil
}

func storeObjects(inf *client.Informer) map[string]*unstructured.Unstructured {
	out := map[string]*unstructured.Unstructured{}
	for _, o := range inf.GetStore().List() {
		out[keyOf(o)] = o.(*unstructured.Unstructured)
	}
	return out
}

func setLabel(t *testing.T, ctx context.Context, cc *client.ClusterClient, shard, cluster, value string) {
	t.Helper()
	r := cc.Cluster(shard, cluster).Resource(apiExportsGVR)
	o, err := r.Get(ctx, exportName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	o.SetLabels(map[string]string{"v": value})
	if _, err := r.Update(ctx, o, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func TestIntegrationWildcardInformer(t *testing.T) {
	t.Parallel() // its own server
	srv := cachetest.StartServer(t)
	ctx := context.Background()
	cc, err := client.NewForConfig(srv.Config())
	if err != nil {
		t.Fatal(err)
	}
	want := seedExports(t, ctx, cc)
	factory, inf := startFactory(t, cc)
	view := newViewHandler()
	if _, err := inf.AddEventHandler(view); err != nil {
		t.Fatal(err)
	}
	run(t, factory)
	waitForKeys(t, inf, want)
	idx := inf.GetIndexer()
	for _, s := range shards {
		objs, err := client.ListByShard(idx, s)
		if err != nil || len(objs) != len(clusters) {
			t.Errorf("shard %s: %d objects, err %v", s, len(objs), err)
		}
		for _, o := range objs {
			if o.GetAnnotations()[kcpcache.AnnotationShard] != s {
				t.Errorf("shard index %s holds %s", s, keyOf(o))
			}
		}
	}
	for _, c := range clusters {
		objs, err := client.ListByCluster(idx, c)
		if err != nil || len(objs) != len(shards) {
			t.Errorf("cluster %s: %d objects, err %v", c, len(objs), err)
		}
		// The same cluster name on three shards is ambiguous, and said so.
		if _, err := client.GetByClusterAndName(idx, c, exportName); !errors.Is(err, client.ErrAmbiguous) {
			t.Errorf("cluster %s: err %v, want ErrAmbiguous", c, err)
		}
		for _, s := range shards {
			o, err := client.GetByPathAndName(idx, pathOf(s, c), exportName)
			if err != nil {
				t.Errorf("path %s: %v", pathOf(s, c), err)
				continue
			}
			if k := keyOf(o); k != client.ToKey(s, c, "", exportName) {
				t.Errorf("path %s found %s", pathOf(s, c), k)
			}
		}
	}
	if _, err := client.GetByPathAndName(idx, "root:nope", exportName); !apierrors.IsNotFound(err) {
		t.Errorf("unknown path: err %v, want NotFound", err)
	}

	// Updates and deletes propagate, and touch only their own copy.
	setLabel(t, ctx, cc, "beige", "org", "2")
	if err := cc.Cluster("cyan", "root").Resource(apiExportsGVR).Delete(ctx, exportName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	expected := map[string]string{}
	for _, k := range want {
		expected[k] = ""
	}
	expected[client.ToKey("beige", "org", "", exportName)] = "2"
	delete(expected, client.ToKey("cyan", "root", "", exportName))
	cachetest.Eventually(t, "store after update and delete", func(context.Context) error { return compareObjects(storeObjects(inf), expected) })
	cachetest.Eventually(t, "handler view after update and delete", func(context.Context) error { return view.check(expected) })

	if _, err := (client.Fallback{Cache: idx, Resource: apiExports}).GetByPathAndName(pathOf("cyan", "root"), exportName); !apierrors.IsNotFound(err) {
		t.Errorf("deleted object: err %v, want NotFound", err)
	}
	cachetest.Eventually(t, "watching", func(context.Context) error {
		if last, watching := inf.Freshness(); last.IsZero() || !watching {
			return fmt.Errorf("freshness (%v, %v)", last, watching)
		}
		return nil
	})
}

func TestIntegrationInformerSurvivesRestart(t *testing.T) {
	t.Parallel() // its own server
	srv := cachetest.StartServer(t)
	ctx := context.Background()
	cfg := srv.Config()
	log := &requestLog{}
	cfg.Wrap(log.wrap)
	conns := &cachetest.ConnTracker{}
	cfg.Dial = conns.Dial
	cc, err := client.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := seedExports(t, ctx, cc)
	factory, inf := startFactory(t, cc)
	view := newViewHandler()
	if _, err := inf.AddEventHandler(view); err != nil {
		t.Fatal(err)
	}
	run(t, factory)
	waitForKeys(t, inf, want)
	syncedBefore, _ := inf.Freshness()

	srv.RestartServer(t)
	// An in-process server does not take its connections with it when it
	// stops, and one still shutting down keeps answering on them. Cut them,
	// as the exit of a server process would, so the informer must reconnect
	// to the new server.
	restarted := time.Now()
	conns.CutAll()

	// Change things after the restart; the informer must pick up each change
	// exactly once, keep everything else, and add nothing twice.
	setLabel(t, ctx, cc, "beige", "root", "after-restart")
	if err := cc.Cluster("amber", "org").Resource(apiExportsGVR).Delete(ctx, exportName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cc.Cluster("cyan", "new").Resource(apiExportsGVR).Create(ctx, newAPIExport(exportName, pathOf("cyan", "new")), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	expected := map[string]string{}
	for _, k := range want {
		expected[k] = ""
	}
	expected[client.ToKey("beige", "root", "", exportName)] = "after-restart"
	delete(expected, client.ToKey("amber", "org", "", exportName))
	expected[client.ToKey("cyan", "new", "", exportName)] = ""

	cachetest.Eventually(t, "store after restart", func(context.Context) error { return compareObjects(storeObjects(inf), expected) })
	cachetest.Eventually(t, "handler view after restart", func(context.Context) error { return view.check(expected) })
	if n := len(inf.GetIndexer().ListKeys()); n != len(expected) {
		t.Errorf("store holds %d keys, want %d", n, len(expected))
	}
	if objs, err := client.ListByCluster(inf.GetIndexer(), "root"); err != nil || len(objs) != len(shards) {
		t.Errorf("cluster index after restart: %d objects, err %v", len(objs), err)
	}
	cachetest.Eventually(t, "watching the new server", func(context.Context) error {
		if _, watching := inf.Freshness(); !watching {
			return errors.New("not watching")
		}
		if log.watchesSince(restarted) == 0 {
			return errors.New("no watch opened since the restart")
		}
		return nil
	})
	if last, _ := inf.Freshness(); last.Before(syncedBefore) {
		t.Errorf("last sync went back from %v to %v", syncedBefore, last)
	}
}

// requestLog records the URL and time of every request a config sends.
type requestLog struct {
	mu    sync.Mutex
	urls  []url.URL
	times []time.Time
}

func (l *requestLog) wrap(rt http.RoundTripper) http.RoundTripper {
	return cachetest.RoundTripperFunc(func(req *http.Request) (*http.Response, error) {
		l.mu.Lock()
		l.urls = append(l.urls, *req.URL)
		l.times = append(l.times, time.Now())
		l.mu.Unlock()
		return rt.RoundTrip(req)
	})
}

func (l *requestLog) all() []url.URL {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]url.URL(nil), l.urls...)
}

// watchesSince counts the watch requests sent after t.
func (l *requestLog) watchesSince(t time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for i, u := range l.urls {
		if u.Query().Get("watch") == "true" && l.times[i].After(t) {
			n++
		}
	}
	return n
}

func TestIntegrationWildcardInformerNeverSendsInitialEvents(t *testing.T) {
	t.Parallel() // its own server
	srv := cachetest.StartServer(t)
	ctx := context.Background()
	cfg := srv.Config()
	log := &requestLog{}
	cfg.Wrap(log.wrap)
	cc, err := client.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := seedExports(t, ctx, cc)
	factory, inf := startFactory(t, cc)
	run(t, factory)
	waitForKeys(t, inf, want)
	cachetest.Eventually(t, "a watch request", func(context.Context) error {
		for _, u := range log.all() {
			if u.Query().Get("watch") == "true" {
				return nil
			}
		}
		return errors.New("none yet")
	})
	const wildcardPath = "/services/cache/shards/*/clusters/*/apis/apis.kcp.io/v1alpha1/apiexports"
	var lists, watches int
	for _, u := range log.all() {
		if u.Query().Has("sendInitialEvents") {
			t.Errorf("request %s asked for sendInitialEvents", u.String())
		}
		if u.Path != wildcardPath {
			continue
		}
		if u.Query().Get("watch") == "true" {
			watches++
		} else {
			lists++
		}
	}
	if lists == 0 || watches == 0 {
		t.Errorf("%d lists and %d watches of %s, want both", lists, watches, wildcardPath)
	}
}

// TestIntegrationServerRefusesWildcardWatchList pins the server behaviour the
// informers rely on never meeting.
func TestIntegrationServerRefusesWildcardWatchList(t *testing.T) {
	t.Parallel() // its own server
	srv := cachetest.StartServer(t)
	cc, err := client.NewForConfig(srv.Config())
	if err != nil {
		t.Fatal(err)
	}
	_, err = cc.Cluster("*", "*").Resource(apiExportsGVR).Watch(context.Background(), metav1.ListOptions{
		SendInitialEvents:    ptr.To(true),
		ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan,
		AllowWatchBookmarks:  true,
	})
	if !apierrors.IsBadRequest(err) {
		t.Errorf("err %v, want BadRequest", err)
	}
}

// TestIntegrationRouting writes through a context-routed config with the
// shard-from-object round tripper and reads back through ClusterClient.
func TestIntegrationRouting(t *testing.T) {
	t.Parallel() // its own server
	srv := cachetest.StartServer(t)
	ctx := context.Background()
	cfg := client.NewConfig(srv.Config())
	cfg.Wrap(client.NewShardFromObjectRoundTripper)
	routed, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	obj := newAPIExport("routed", "")
	obj.SetAnnotations(map[string]string{kcpcache.AnnotationShard: "delta"})
	if _, err := routed.Resource(apiExportsGVR).Create(client.WithCluster(ctx, "root"), obj, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cc, err := client.NewForConfig(srv.Config())
	if err != nil {
		t.Fatal(err)
	}
	got, err := cc.Cluster("delta", "root").Resource(apiExportsGVR).Get(ctx, "routed", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if a := got.GetAnnotations(); a[kcpcache.AnnotationShard] != "delta" || a[kcpcache.AnnotationCluster] != "root" {
		t.Errorf("annotations %v", a)
	}
	// Reads by context reach the same object; the wildcard refuses a GET.
	if _, err := routed.Resource(apiExportsGVR).Get(client.WithCluster(client.WithShard(ctx, "delta"), "root"), "routed", metav1.GetOptions{}); err != nil {
		t.Errorf("GET by context: %v", err)
	}
	if _, err := routed.Resource(apiExportsGVR).Get(ctx, "routed", metav1.GetOptions{}); !apierrors.IsBadRequest(err) {
		t.Errorf("GET through the wildcard: err %v, want BadRequest", err)
	}
	if _, err := cc.Cluster("*", "root").Resource(apiExportsGVR).Create(ctx, newAPIExport("nope", ""), metav1.CreateOptions{}); !apierrors.IsMethodNotSupported(err) {
		t.Errorf("create through the wildcard: err %v, want MethodNotAllowed", err)
	}
	// Health stays reachable through the routed config.
	rc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := rc.Get(cfg.Host + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/readyz through the routed config: %s", resp.Status)
	}
	list, err := cc.Cluster("*", "*").Resource(apiExportsGVR).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 {
		t.Errorf("wildcard list has %d items, want 1", len(list.Items))
	}
}
