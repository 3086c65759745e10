package integration_test

import (
	"context"
	"reflect"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	clientfeatures "k8s.io/client-go/features"
	"k8s.io/client-go/tools/cache"

	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
)

// A reflector with client-go's defaults tries a streaming watch-list first.
// The server refuses that on wildcard scopes, client-go falls back to
// LIST+WATCH, and the store keeps every same-named object.
func TestDefaultWildcardReflectorHoldsSameNamedObjects(t *testing.T) {
	t.Parallel()
	if !clientfeatures.FeatureGates().Enabled(clientfeatures.WatchListClient) {
		t.Fatal("client-go's WatchListClient is off: this test would not exercise the watch-list fallback")
	}
	srv := cachetest.StartServer(t)
	ctx := testContext(t)
	for _, p := range [][2]string{{"amber", "root"}, {"blue", "root"}, {"green", "root"}} {
		if _, err := dyn(t, srv, p[0], p[1]).Resource(apiExports).Create(ctx, apiExport("same", nil), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	client := dyn(t, srv, "*", "*").Resource(apiExports)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return client.List(ctx, o) },
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return client.Watch(ctx, o)
		},
	}
	store := cache.NewStore(func(obj interface{}) (string, error) {
		return partitionOf(*obj.(*unstructured.Unstructured)), nil
	})
	r := cache.NewReflector(lw, &unstructured.Unstructured{}, store, 0)
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go r.RunWithContext(rctx)

	want := []string{"amber/root/same", "blue/root/same", "green/root/same"}
	cachetest.Eventually(t, "the reflector holds the three same-named objects apart", func(context.Context) error {
		if got := sortedCopy(store.ListKeys()); !reflect.DeepEqual(got, want) {
			return errorf("reflector store = %v, want %v", got, want)
		}
		return nil
	})
}
