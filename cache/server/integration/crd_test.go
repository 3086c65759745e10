package integration_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"

	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
)

// Plain clients (kubectl among them) discover types under a scoped prefix.
func TestDiscoveryUnderAScopedPrefix(t *testing.T) {
	t.Parallel()
	srv := cachetest.StartServer(t)
	srv.InstallCRD(t, cachetest.WidgetNames)
	// Discovery follows a runtime CRD a moment after the type is served
	// (apiextensions' discovery controller has its own queue): poll.
	for _, scope := range [][2]string{{"amber", "root"}, {"*", "*"}} {
		cachetest.Eventually(t, "discovery lists every type", func(context.Context) error {
			dc, err := discovery.NewDiscoveryClientForConfig(srv.ScopedConfig(scope[0], scope[1]))
			if err != nil {
				return err
			}
			mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
			for _, gvk := range []schema.GroupVersionKind{
				{Group: "apis.kcp.io", Version: "v1alpha1", Kind: "APIExport"},
				{Group: "apis.kcp.io", Version: "v1alpha1", Kind: "APIResourceSchema"},
				{Group: "example.dev", Version: "v1", Kind: "Widget"},
			} {
				m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
				if err != nil {
					return fmt.Errorf("%v: no mapping for %v: %w", scope, gvk, err)
				}
				if wantNamespaced := gvk.Kind == "Widget"; (m.Scope.Name() == "namespace") != wantNamespaced {
					return fmt.Errorf("%v: %v has scope %q", scope, gvk, m.Scope.Name())
				}
			}
			return nil
		})
	}
}

// Clients that do not ask for aggregated discovery list /apis and must find
// the cache's groups there too, under every prefix.
func TestUnaggregatedDiscoveryListsCRDGroups(t *testing.T) {
	t.Parallel()
	srv := cachetest.StartServer(t)
	srv.InstallCRD(t, cachetest.WidgetNames)
	for _, scope := range [][2]string{{"amber", "root"}, {"*", "*"}} {
		cfg := srv.ScopedConfig(scope[0], scope[1])
		client, err := rest.HTTPClientFor(cfg)
		if err != nil {
			t.Fatal(err)
		}
		cachetest.Eventually(t, "the unaggregated /apis under "+scope[0]+"/"+scope[1]+" lists the widget group", func(context.Context) error {
			req, _ := newRequest(context.Background(), "GET", cfg.Host+"/apis", nil)
			req.Header.Set("Authorization", "Bearer "+cfg.BearerToken)
			req.Header.Set("Accept", "application/json") // explicitly not aggregated
			resp, err := client.Do(req)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			var groups metav1.APIGroupList
			if err := json.NewDecoder(resp.Body).Decode(&groups); err != nil {
				return err
			}
			found := map[string]string{}
			for _, g := range groups.Groups {
				found[g.Name] = g.PreferredVersion.Version
			}
			// apiexports serve v1alpha2 as well, so the group prefers it.
			if found["apis.kcp.io"] != "v1alpha2" || found["example.dev"] != "v1" {
				return errorf("%v: /apis lists %v", scope, found)
			}
			return nil
		})
	}
}

// A CRD added at runtime can be removed again, but not while any partition
// still holds its objects: upstream's finalizer would hang in Terminating.
func TestRuntimeCRDDeletion(t *testing.T) {
	t.Parallel()
	srv := cachetest.StartServer(t)
	ctx := testContext(t)
	widgets := srv.InstallCRD(t, cachetest.WidgetNames)
	if _, err := dyn(t, srv, "blue", "org1").Resource(widgets).Namespace("default").Create(ctx, newObject(widgets, "Widget", "default", "w", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	crds, err := apiextensionsclient.NewForConfig(srv.Config())
	if err != nil {
		t.Fatal(err)
	}
	err = crds.ApiextensionsV1().CustomResourceDefinitions().Delete(ctx, "widgets.example.dev", metav1.DeleteOptions{})
	if !apierrors.IsConflict(err) {
		t.Fatalf("deleting a CRD with stored objects: got %v, want a Conflict", err)
	}
	if _, err := crds.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, "widgets.example.dev", metav1.GetOptions{}); err != nil {
		t.Fatalf("refused CRD is gone: %v", err)
	}

	if err := dyn(t, srv, "blue", "org1").Resource(widgets).Namespace("default").Delete(ctx, "w", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := crds.ApiextensionsV1().CustomResourceDefinitions().Delete(ctx, "widgets.example.dev", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting an unused CRD: %v", err)
	}
	// Upstream's CRD finalizer polls every 5 s; with the suite's parallel
	// tests on two cores it took over a minute once.
	cachetest.EventuallyWithin(t, "the unused CRD is deleted", 3*time.Minute, func(context.Context) error {
		_, err := crds.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, "widgets.example.dev", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return errorf("CRD still present (err=%v)", err)
	})
}
