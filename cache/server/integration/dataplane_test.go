package integration_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"

	"github.com/kcp-cache/kcp-cache/cache/server"
	"github.com/kcp-cache/kcp-cache/cache/server/bootstrap"
	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
	"github.com/kcp-cache/kcp-cache/cache/server/dataplane"
	"github.com/kcp-cache/kcp-cache/cache/server/partition"
)

func TestPathSegmentNamesWhereTheTypeSaysSo(t *testing.T) {
	t.Parallel()
	srv := cachetest.StartServer(t)
	ctx := testContext(t)
	roles := bootstrap.SchemalessCRD(bootstrap.CRDNames{Group: "rbac.example.dev", Version: "v1", Resource: "clusterroles", Kind: "ClusterRole"})
	roles.Annotations = map[string]string{dataplane.ValidateNameAnnotation: string(dataplane.PathSegmentNames)}
	srv.InstallCRDObject(t, roles)
	rolesGVR := schema.GroupVersionResource{Group: "rbac.example.dev", Version: "v1", Resource: "clusterroles"}
	c := dyn(t, srv, "amber", "root")

	name := "system:kcp:apiexport:tenancy:bind"
	created, err := c.Resource(rolesGVR).Create(ctx, newObject(rolesGVR, "ClusterRole", "", name, nil), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating %q: %v", name, err)
	}
	got, err := c.Resource(rolesGVR).Get(ctx, name, metav1.GetOptions{})
	if err != nil || got.GetUID() != created.GetUID() {
		t.Fatalf("reading %q back: %v", name, err)
	}
	if err := c.Resource(rolesGVR).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting %q: %v", name, err)
	}

	// Path-segment names still refuse what cannot be a path segment.
	for _, bad := range []string{"..", "a%b"} {
		_, err := c.Resource(rolesGVR).Create(ctx, newObject(rolesGVR, "ClusterRole", "", bad, nil), metav1.CreateOptions{})
		if !apierrors.IsInvalid(err) && !apierrors.IsBadRequest(err) {
			t.Errorf("creating %q: got %v, want a 400 or 422", bad, err)
		}
	}
	// Types without the annotation keep DNS-1123 names.
	_, err = c.Resource(apiExports).Create(ctx, apiExport(name, nil), metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) {
		t.Errorf("creating APIExport %q: got %v, want 422", name, err)
	}
}

// twoVersionCRD is a type served as v1 and v2 without conversion.
func twoVersionCRD() *apiextensionsv1.CustomResourceDefinition {
	crd := bootstrap.SchemalessCRD(bootstrap.CRDNames{Group: "multi.example.dev", Version: "v1", Resource: "gizmos", Kind: "Gizmo"})
	v2 := *crd.Spec.Versions[0].DeepCopy()
	v2.Name, v2.Storage = "v2", false
	crd.Spec.Versions = append(crd.Spec.Versions, v2)
	return crd
}

func TestEveryVersionServesTheSameObjects(t *testing.T) {
	t.Parallel()
	srv := cachetest.StartServer(t)
	ctx := testContext(t)
	srv.InstallCRDObject(t, twoVersionCRD())
	v1 := schema.GroupVersionResource{Group: "multi.example.dev", Version: "v1", Resource: "gizmos"}
	v2 := v1
	v2.Version = "v2"
	c := dyn(t, srv, "amber", "root")

	w, err := c.Resource(v2).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	if _, err := c.Resource(v1).Create(ctx, newObject(v1, "Gizmo", "", "g", map[string]interface{}{"size": int64(1)}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got, err := c.Resource(v2).Get(ctx, "g", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reading a v1 object as v2: %v", err)
	}
	if got.GetAPIVersion() != "multi.example.dev/v2" || got.Object["spec"].(map[string]interface{})["size"] != int64(1) {
		t.Errorf("read as v2: %v", got.Object)
	}

	// An update through v2 is what v1 reads.
	got.Object["spec"] = map[string]interface{}{"size": int64(2)}
	if _, err := c.Resource(v2).Update(ctx, got, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("updating through v2: %v", err)
	}
	back, err := c.Resource(v1).Get(ctx, "g", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if back.GetAPIVersion() != "multi.example.dev/v1" || back.Object["spec"].(map[string]interface{})["size"] != int64(2) {
		t.Errorf("read back as v1: %v", back.Object)
	}

	for _, gvr := range []schema.GroupVersionResource{v1, v2} {
		list, err := c.Resource(gvr).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(list.Items) != 1 || list.Items[0].GetAPIVersion() != gvr.GroupVersion().String() || list.GetAPIVersion() != gvr.GroupVersion().String() {
			t.Errorf("list as %s: %s %v", gvr.Version, list.GetAPIVersion(), list.Items)
		}
	}

	// The v2 watch saw both writes as v2.
	for _, want := range []watch.EventType{watch.Added, watch.Modified} {
		select {
		case ev := <-w.ResultChan():
			u, ok := ev.Object.(*unstructured.Unstructured)
			if ev.Type != want || !ok || u.GetAPIVersion() != "multi.example.dev/v2" {
				t.Fatalf("watch event %s %v, want %s as v2", ev.Type, ev.Object, want)
			}
		case <-ctx.Done():
			t.Fatalf("no %s event", want)
		}
	}
}

func TestRestartWithAnAddedVersion(t *testing.T) {
	t.Parallel()
	oneVersion := func(cfg *server.Config) {
		cfg.Extra.BootstrapCRDs = []*apiextensionsv1.CustomResourceDefinition{
			bootstrap.SchemalessCRD(bootstrap.CRDNames{Group: "apis.kcp.io", Version: "v1alpha1", Resource: "apiexports", Kind: "APIExport"}),
		}
	}
	srv := cachetest.StartServer(t, cachetest.WithConfig(oneVersion))
	ctx := testContext(t)
	if _, err := dyn(t, srv, "amber", "root").Resource(apiExports).Create(ctx, apiExport("old", map[string]interface{}{"a": "b"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// As kcp's APIExports gained v1alpha2, which became the storage version:
	// the restart declares the whole kcp profile, as a server upgraded from
	// a release that served apiexports as v1alpha1 alone does.
	srv.RestartServer(t, cachetest.WithConfig(func(cfg *server.Config) {
		cfg.Extra.BootstrapCRDs = bootstrap.DefaultCRDs()
	}))
	for _, version := range []string{"v1alpha1", "v1alpha2"} {
		gvr := apiExports
		gvr.Version = version
		got, err := dyn(t, srv, "amber", "root").Resource(gvr).Get(ctx, "old", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("reading the old object as %s: %v", version, err)
		}
		if got.GetAPIVersion() != "apis.kcp.io/"+version || got.Object["spec"].(map[string]interface{})["a"] != "b" {
			t.Errorf("as %s: %v", version, got.Object)
		}
	}
}

// TestExistingObjectsAreNeverReportedAbsentDuringAStart polls an existing
// object through a restart: each answer is the object, a refused
// connection, or a retryable 429/503, and never a 404.
func TestExistingObjectsAreNeverReportedAbsentDuringAStart(t *testing.T) {
	t.Parallel()
	srv := cachetest.StartServer(t)
	ctx := testContext(t)
	if _, err := dyn(t, srv, "amber", "root").Resource(apiExports).Create(ctx, apiExport("present", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg := srv.ScopedConfig("amber", "root")
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	url := cfg.Host + "/apis/apis.kcp.io/v1alpha1/apiexports/present"

	pollCtx, stopPolling := context.WithCancel(ctx)
	var mu sync.Mutex
	codes := map[int]int{}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for pollCtx.Err() == nil {
			req, _ := http.NewRequestWithContext(pollCtx, http.MethodGet, url, nil)
			req.Header.Set("Authorization", "Bearer "+cfg.BearerToken)
			resp, err := client.Do(req)
			if err != nil {
				continue // not listening yet
			}
			resp.Body.Close()
			mu.Lock()
			codes[resp.StatusCode]++
			mu.Unlock()
		}
	}()
	srv.RestartServer(t)
	// A few more answers from the ready server.
	cachetest.Eventually(t, "the restarted server answers 200", func(context.Context) error {
		mu.Lock()
		defer mu.Unlock()
		if codes[http.StatusOK] < 5 {
			return errorf("%d answers of 200 so far", codes[http.StatusOK])
		}
		return nil
	})
	stopPolling()
	wg.Wait()
	t.Logf("answers by status: %v", codes)
	for code, n := range codes {
		if code != http.StatusOK && code != http.StatusTooManyRequests && code != http.StatusServiceUnavailable {
			t.Errorf("%d answers with status %d", n, code)
		}
	}
}

func TestATypeRegisteredWithoutACRD(t *testing.T) {
	t.Parallel()
	srv := cachetest.StartServer(t)
	ctx := testContext(t)
	gadgets := schema.GroupVersionResource{Group: "gadgets.example.dev", Version: "v1", Resource: "gadgets"}
	c := dyn(t, srv, "amber", "root").Resource(gadgets).Namespace("ns")
	if _, err := c.List(ctx, metav1.ListOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("before registering: got %v, want 404", err)
	}
	err := srv.Server().Types().Register(ctx, dataplane.Resource{
		Group: "gadgets.example.dev", Resource: "gadgets", Singular: "gadget", Kind: "Gadget", ListKind: "GadgetList",
		Namespaced: true, Versions: []string{"v1"},
	})
	if err != nil {
		t.Fatal(err)
	}
	cachetest.Eventually(t, "a gadget can be created once the type is registered", func(context.Context) error {
		_, err := c.Create(ctx, newObject(gadgets, "Gadget", "ns", "g1", map[string]interface{}{"x": "y"}), metav1.CreateOptions{})
		return err
	})
	list, err := dyn(t, srv, "*", "*").Resource(gadgets).List(ctx, metav1.ListOptions{})
	if err != nil || len(list.Items) != 1 || partitionOf(list.Items[0]) != "amber/root/ns/g1" {
		t.Fatalf("listing */*: %v %v", err, list)
	}

	srv.Server().Types().Unregister(ctx, gadgets.GroupResource())
	if _, err := c.Get(ctx, "g1", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("after unregistering: got %v, want 404", err)
	}
}

func TestServerSideApplyAndDryRun(t *testing.T) {
	t.Parallel()
	srv := cachetest.StartServer(t)
	ctx := testContext(t)
	c := dyn(t, srv, "amber", "root").Resource(apiExports)

	applied, err := c.Apply(ctx, "applied", apiExport("applied", map[string]interface{}{"k": "v1"}), metav1.ApplyOptions{FieldManager: "test"})
	if err != nil {
		t.Fatalf("apply: %v", err)
	}
	// Field ownership as upstream keeps it: a manager changes its own fields
	// freely, another one conflicts unless it forces.
	if _, err = c.Apply(ctx, "applied", apiExport("applied", map[string]interface{}{"k": "v2"}), metav1.ApplyOptions{FieldManager: "test"}); err != nil {
		t.Errorf("the owner's second apply: %v", err)
	}
	_, err = c.Apply(ctx, "applied", apiExport("applied", map[string]interface{}{"k": "v3"}), metav1.ApplyOptions{FieldManager: "other"})
	if !apierrors.IsConflict(err) {
		t.Errorf("another manager's unforced apply: got %v, want a conflict", err)
	}
	applied, err = c.Apply(ctx, "applied", apiExport("applied", map[string]interface{}{"k": "v3"}), metav1.ApplyOptions{FieldManager: "other", Force: true})
	if err != nil || applied.Object["spec"].(map[string]interface{})["k"] != "v3" {
		t.Fatalf("another manager's forced apply: %v %v", err, applied)
	}
	// An apply to an existing object keeps its shape.
	stored, err := c.Get(ctx, "applied", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for k := range stored.Object {
		keys = append(keys, k)
	}
	if got := strings.Join(sortedCopy(keys), ","); got != "apiVersion,kind,metadata,spec" {
		t.Errorf("after applying twice the object has the top-level fields %s", got)
	}

	before := etcdState(t, srv)
	if _, err := c.Create(ctx, apiExport("dry", nil), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Fatalf("dry-run create: %v", err)
	}
	if _, err := c.Patch(ctx, "applied", types.MergePatchType, []byte(`{"spec":{"k":"v9"}}`), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Fatalf("dry-run patch: %v", err)
	}
	if after := etcdState(t, srv); len(after) != len(before) {
		t.Errorf("dry run changed etcd: %d keys before, %d after", len(before), len(after))
	} else {
		for k, rev := range before {
			if after[k] != rev {
				t.Errorf("dry run changed %s", k)
			}
		}
	}
	got, err := c.Get(ctx, "applied", metav1.GetOptions{})
	if err != nil || got.Object["spec"].(map[string]interface{})["k"] != "v3" || strings.Contains(got.GetName(), "dry") {
		t.Errorf("after dry runs: %v %v", err, got)
	}
}

func TestRestartThatRemovesAStoredVersionIsRefused(t *testing.T) {
	t.Parallel()
	// Declared as before kcp added v1alpha2, so v1alpha1 is stored.
	srv := cachetest.StartServer(t, cachetest.WithConfig(func(cfg *server.Config) {
		cfg.Extra.BootstrapCRDs = []*apiextensionsv1.CustomResourceDefinition{
			bootstrap.SchemalessCRD(bootstrap.CRDNames{Group: "apis.kcp.io", Version: "v1alpha1", Resource: "apiexports", Kind: "APIExport"}),
		}
	}))
	ctx := testContext(t)
	if _, err := dyn(t, srv, "amber", "root").Resource(apiExports).Create(ctx, apiExport("kept", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	before := etcdState(t, srv)

	// v1alpha1 was the storage version; a declaration with v1alpha2 alone
	// would orphan it.
	srv.RestartServerUnready(t, cachetest.WithConfig(func(cfg *server.Config) {
		cfg.Extra.BootstrapCRDs = []*apiextensionsv1.CustomResourceDefinition{
			bootstrap.SchemalessCRD(bootstrap.CRDNames{Group: "apis.kcp.io", Version: "v1alpha2", Resource: "apiexports", Kind: "APIExport"}),
			bootstrap.SchemalessCRD(bootstrap.CRDNames{Group: "apis.kcp.io", Version: "v1alpha1", Resource: "apiresourceschemas", Kind: "APIResourceSchema"}),
		}
	}))
	client, err := rest.HTTPClientFor(srv.Config())
	if err != nil {
		t.Fatal(err)
	}
	var body string
	cachetest.Eventually(t, "the types check reports the declaration that removes a stored version", func(context.Context) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.Config().Host+"/readyz/"+server.TypesReadyCheckName, nil)
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		body = string(b)
		if resp.StatusCode == http.StatusOK || !strings.Contains(body, "removes version(s) v1alpha1") {
			return errorf("readyz/%s: %d %s", server.TypesReadyCheckName, resp.StatusCode, body)
		}
		return nil
	})
	t.Logf("refusal: %s", body)

	// Nothing changed in etcd (the CRD kept v1alpha1), and the object is
	// still served.
	after := etcdState(t, srv)
	for k, rev := range before {
		if after[k] != rev {
			t.Errorf("%s changed (revision %d → %d)", k, rev, after[k])
		}
	}
	v2 := apiExports
	v2.Version = "v1alpha2"
	if _, err := dyn(t, srv, "amber", "root").Resource(v2).Get(ctx, "kept", metav1.GetOptions{}); err != nil {
		t.Errorf("reading the stored object: %v", err)
	}
}

func TestWatchCacheReleasesTheHistoryOfAMassDeletion(t *testing.T) {
	t.Parallel()
	quickTrim := func(cfg *server.Config) {
		g := cfg.Apiextensions.GenericConfig.RESTOptionsGetter.(partition.RESTOptionsGetter)
		g.HistoryTrim = partition.HistoryTrim{MinDeletes: 5, Idle: time.Second}
		cfg.Apiextensions.GenericConfig.RESTOptionsGetter = g
	}
	srv := cachetest.StartServer(t, cachetest.WithConfig(quickTrim))
	ctx := testContext(t)
	c := dyn(t, srv, "amber", "root").Resource(apiExports)
	for i := 0; i < 8; i++ {
		if _, err := c.Create(ctx, apiExport(fmt.Sprintf("e%d", i), nil), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// The server must end this watch well before its own deadline.
	watchCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	w, err := dyn(t, srv, "*", "*").Resource(apiExports).Watch(watchCtx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	for i := 0; i < 6; i++ {
		if err := c.Delete(ctx, fmt.Sprintf("e%d", i), metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// The watch sees the deletions, then ends when the cache relists.
	deleted := 0
	for ev := range w.ResultChan() {
		if ev.Type == watch.Deleted {
			deleted++
		}
	}
	if watchCtx.Err() != nil {
		t.Fatalf("the watch was not ended by the server: %v", watchCtx.Err())
	}
	if deleted != 6 {
		t.Errorf("the watch saw %d deletions before it ended, want 6", deleted)
	}
	// The relisted cache serves what is left, and new changes.
	cachetest.Eventually(t, "the relisted cache serves what is left", func(context.Context) error {
		list, err := dyn(t, srv, "*", "*").Resource(apiExports).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		if got := partitionsOf(list.Items); len(got) != 2 || got[0] != "amber/root/e6" || got[1] != "amber/root/e7" {
			return errorf("after the relist: %v", got)
		}
		return nil
	})
	if _, err := c.Create(ctx, apiExport("after", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// resourceVersion=0 reads the watch cache, which sees the create soon.
	cachetest.Eventually(t, "the watch cache sees the create", func(context.Context) error {
		_, err := c.Get(ctx, "after", metav1.GetOptions{ResourceVersion: "0"})
		return err
	})
}
