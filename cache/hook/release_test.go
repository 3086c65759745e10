package hook

import (
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/replication"
)

// A host of kcp main replicates and watches main's types, a host of v0.32
// (the default) v0.32's: each asks its local sources only for types it has.
func TestHookDefaultsFollowTheKcpRelease(t *testing.T) {
	cachedResources := schema.GroupVersionResource{Group: "cache.kcp.io", Version: "v1alpha1", Resource: "cachedresources"}
	clusterCachedResources := schema.GroupVersionResource{Group: "cache.kcp.io", Version: "v1alpha1", Resource: "clustercachedresources"}
	for _, tc := range []struct {
		release    kcpcache.KcpRelease
		has, lacks schema.GroupVersionResource
	}{
		{"", cachedResources, clusterCachedResources},
		{kcpcache.KcpV032, cachedResources, clusterCachedResources},
		{kcpcache.KcpMain, clusterCachedResources, cachedResources},
	} {
		var asked []schema.GroupVersionResource
		sources := func(gvr schema.GroupVersionResource) (replication.LocalSource, error) {
			asked = append(asked, gvr)
			inf := cache.NewSharedIndexInformer(&cache.ListWatch{}, &unstructured.Unstructured{}, 0, cache.Indexers{})
			return replication.LocalSource{Informer: inf, Get: func(string, string, string) (runtime.Object, error) { return nil, nil }}, nil
		}
		h, err := New(Config{Shard: "alpha", CacheConfig: &rest.Config{Host: "https://127.0.0.1:1"}, LocalSources: sources, KcpRelease: tc.release})
		if err != nil {
			t.Fatalf("%q: %v", tc.release, err)
		}
		if !slices.Contains(asked, tc.has) || slices.Contains(asked, tc.lacks) {
			t.Errorf("%q: local sources asked for %v; want %s and not %s", tc.release, asked, tc.has.Resource, tc.lacks.Resource)
		}
		if !slices.Contains(h.globalGVRs, tc.has) || slices.Contains(h.globalGVRs, tc.lacks) {
			t.Errorf("%q: global informers on %v; want %s and not %s", tc.release, h.globalGVRs, tc.has.Resource, tc.lacks.Resource)
		}
	}
	if _, err := New(Config{Shard: "alpha", CacheConfig: &rest.Config{Host: "https://127.0.0.1:1"}, KcpRelease: "v0.31"}); err == nil {
		t.Error("an unknown release line was accepted")
	}
}
