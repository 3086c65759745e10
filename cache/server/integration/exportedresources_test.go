package integration_test

import (
	"context"
	"net/http"
	"slices"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
)

// An exported resource's schema, as a kcp shard pushes it.
func widgetSchema(name string) *unstructured.Unstructured {
	return newObject(apiResourceSchema, "APIResourceSchema", "", name, map[string]interface{}{
		"group": "example.dev",
		"names": map[string]interface{}{"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
		"scope": "Namespaced",
		"versions": []interface{}{
			map[string]interface{}{"name": "v1", "served": true, "storage": true, "schema": map[string]interface{}{"type": "object"}},
			map[string]interface{}{"name": "v2", "served": false, "storage": false},
		},
	})
}

// An APIExport as kcp v0.32 writes it (v1alpha2), with its identity.
func widgetExport(name, schemaName, identity string) *unstructured.Unstructured {
	gvr := apiExports
	gvr.Version = "v1alpha2"
	u := newObject(gvr, "APIExport", "", name, map[string]interface{}{
		"resources": []interface{}{map[string]interface{}{"name": "widgets", "group": "example.dev", "schema": schemaName, "storage": map[string]interface{}{"crd": map[string]interface{}{}}}},
	})
	u.Object["status"] = map[string]interface{}{"identityHash": identity}
	return u
}

func identityGVR(version, resource string) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: "example.dev", Version: version, Resource: resource}
}

func TestExportedResourcesAreServedUnderTheirIdentity(t *testing.T) {
	t.Parallel()
	srv := cachetest.StartServer(t)
	ctx := testContext(t)
	amber := dyn(t, srv, "amber", "root")
	exportsV2 := apiExports
	exportsV2.Version = "v1alpha2"

	for _, o := range []struct {
		gvr schema.GroupVersionResource
		obj *unstructured.Unstructured
	}{
		{apiResourceSchema, widgetSchema("v1.widgets.example.dev")},
		{exportsV2, widgetExport("widgets-a", "v1.widgets.example.dev", "aaa")},
		{exportsV2, widgetExport("widgets-b", "v1.widgets.example.dev", "bbb")},
	} {
		if _, err := amber.Resource(o.gvr).Create(ctx, o.obj, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	widgetsA, widgetsB := identityGVR("v1", "widgets:aaa"), identityGVR("v1", "widgets:bbb")
	cachetest.Eventually(t, "both identities served", func(ctx context.Context) error {
		for _, gvr := range []schema.GroupVersionResource{widgetsA, widgetsB} {
			if _, err := amber.Resource(gvr).Namespace("ns").Create(ctx, newObject(gvr, "Widget", "ns", "w", nil), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				return err
			}
		}
		return nil
	})

	// Each identity under its own key prefix; the same name in both.
	for _, want := range []string{"/example.dev/widgets:aaa/amber/root/ns/w", "/example.dev/widgets:bbb/amber/root/ns/w"} {
		want = srv.EtcdPrefix() + want
		if keys := srv.EtcdKeys(t, "/example.dev/"); !slices.Contains(keys, want) {
			t.Errorf("etcd keys %v lack %s", keys, want)
		}
	}
	// Only served versions are served; the wildcard sees one object per identity.
	if _, err := dyn(t, srv, "*", "*").Resource(identityGVR("v2", "widgets:aaa")).List(ctx, metav1.ListOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("v2 is not served by the schema, got %v", err)
	}
	list, err := dyn(t, srv, "*", "*").Resource(widgetsA).List(ctx, metav1.ListOptions{})
	if err != nil || len(list.Items) != 1 || list.Items[0].GetKind() != "Widget" {
		t.Fatalf("*/* widgets:aaa = %v, %v; want the one widget", list, err)
	}

	// An identity nobody declares, of a known resource: an empty list (as
	// kcp's cache answers), and no writes.
	unknown := identityGVR("v1", "widgets:zzz")
	list, err = dyn(t, srv, "*", "*").Resource(unknown).List(ctx, metav1.ListOptions{})
	if err != nil || len(list.Items) != 0 || list.GetResourceVersion() == "" {
		t.Errorf("unknown identity list = %v, %v; want an empty list with a resourceVersion", list, err)
	}
	_, err = amber.Resource(unknown).Namespace("ns").Create(ctx, newObject(unknown, "Widget", "ns", "x", nil), metav1.CreateOptions{})
	if status, ok := err.(apierrors.APIStatus); !ok || status.Status().Code != http.StatusNotFound {
		t.Errorf("create under an unknown identity: %v, want 404", err)
	}
	if keys := srv.EtcdKeys(t, "/example.dev/widgets:zzz/"); len(keys) != 0 {
		t.Errorf("an unknown identity stored %v", keys)
	}
	// An unknown resource stays unknown.
	if _, err := amber.Resource(identityGVR("v1", "gadgets:aaa")).List(ctx, metav1.ListOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("gadgets:aaa = %v, want 404", err)
	}

	// The export leaves the cache: its identity is no longer served (reads
	// find nothing, writes are refused), and its data stays in etcd.
	if err := amber.Resource(exportsV2).Delete(ctx, "widgets-a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// Polled by reading (a write while it is still served would be stored).
	cachetest.Eventually(t, "widgets:aaa no longer served", func(ctx context.Context) error {
		if _, err := amber.Resource(widgetsA).Namespace("ns").Get(ctx, "w", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return errorf("GET under a removed identity: %v, want 404", err)
		}
		return nil
	})
	if _, err := amber.Resource(widgetsA).Namespace("ns").Create(ctx, newObject(widgetsA, "Widget", "ns", "late", nil), metav1.CreateOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("create under a removed identity: %v, want 404", err)
	}
	if keys := srv.EtcdKeys(t, "/example.dev/widgets:aaa/"); !slices.Equal(keys, []string{srv.EtcdPrefix() + "/example.dev/widgets:aaa/amber/root/ns/w"}) {
		t.Errorf("data of the removed identity: %v, want it kept", keys)
	}
	if _, err := amber.Resource(widgetsB).Namespace("ns").Get(ctx, "w", metav1.GetOptions{}); err != nil {
		t.Errorf("the other identity: %v", err)
	}
}

// kcp's CachedResources publish a resource under an identity too.
func TestCachedResourcesAreServedUnderTheirIdentity(t *testing.T) {
	t.Parallel()
	srv := cachetest.StartServer(t)
	ctx := testContext(t)
	cachedResources := schema.GroupVersionResource{Group: "cache.kcp.io", Version: "v1alpha1", Resource: "cachedresources"}
	cr := newObject(cachedResources, "CachedResource", "", "gadgets", map[string]interface{}{
		"group": "example.dev", "version": "v1", "resource": "gadgets",
	})
	cr.SetAnnotations(map[string]string{"cache.kcp.io/resource-kind": "Gadget", "cache.kcp.io/resource-scope": "Cluster"})
	cr.Object["status"] = map[string]interface{}{"identityHash": "ccc"}
	blue := dyn(t, srv, "blue", "org")
	if _, err := blue.Resource(cachedResources).Create(ctx, cr, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	gadgets := identityGVR("v1", "gadgets:ccc")
	cachetest.Eventually(t, "gadgets:ccc served", func(ctx context.Context) error {
		_, err := blue.Resource(gadgets).Create(ctx, newObject(gadgets, "Gadget", "", "g", nil), metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		return nil
	})
	if keys := srv.EtcdKeys(t, "/example.dev/gadgets:ccc/"); !slices.Equal(keys, []string{srv.EtcdPrefix() + "/example.dev/gadgets:ccc/blue/org/g"}) {
		t.Errorf("etcd keys %v", keys)
	}

	// A core-group resource, served under /api/v1.
	core := newObject(cachedResources, "CachedResource", "", "configmaps", map[string]interface{}{"group": "", "version": "v1", "resource": "configmaps"})
	core.SetAnnotations(map[string]string{"cache.kcp.io/resource-kind": "ConfigMap", "cache.kcp.io/resource-scope": "Namespaced"})
	core.Object["status"] = map[string]interface{}{"identityHash": "ddd"}
	if _, err := blue.Resource(cachedResources).Create(ctx, core, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	configMaps := schema.GroupVersionResource{Version: "v1", Resource: "configmaps:ddd"}
	cachetest.Eventually(t, "configmaps:ddd served", func(ctx context.Context) error {
		_, err := blue.Resource(configMaps).Namespace("ns").Create(ctx, newObject(configMaps, "ConfigMap", "ns", "c", nil), metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		return nil
	})
	if keys := srv.EtcdKeys(t, "/configmaps:ddd/"); !slices.Equal(keys, []string{srv.EtcdPrefix() + "/configmaps:ddd/blue/org/ns/c"}) {
		t.Errorf("etcd keys of the core-group identity %v", keys)
	}
	list, err := dyn(t, srv, "*", "*").Resource(configMaps).List(ctx, metav1.ListOptions{})
	if err != nil || len(list.Items) != 1 || list.Items[0].GetAPIVersion() != "v1" {
		t.Errorf("*/* configmaps:ddd = %v, %v", list, err)
	}
	// Published without identity too: core-group identities are stored at
	// the top of the cache's prefix.
	cachetest.Eventually(t, "configmaps served without identity", func(ctx context.Context) error {
		list, err := dyn(t, srv, "*", "*").Resource(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}).List(ctx, metav1.ListOptions{})
		if err != nil || len(list.Items) != 1 || list.Items[0].GetName() != "c" {
			return errorf("*/* configmaps = %v, %v; want the one ConfigMap", list, err)
		}
		return nil
	})
}
