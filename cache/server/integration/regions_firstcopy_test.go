package integration_test

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
)

// TestRegionsFirstCopyOfSeveralTypesIsCompleteAndExact: a mirror's first
// copy of a home holding more than a page of each of three types, in two
// shards, written in parallel by the mirror (convergeWorkers per type):
// every object arrives, once, with the home's uid, creation time, managed
// fields, annotations and spec, and the home's resourceVersion recorded.
func TestRegionsFirstCopyOfSeveralTypesIsCompleteAndExact(t *testing.T) {
	if testing.Short() {
		t.Skip("long scenario (several caches in regions): skipped with -short")
	}
	ctx := testContext(t)
	regions := startRegions(t, ctx, "a", "b")
	a, b := regions["a"], regions["b"]
	types := []struct {
		gvr  schema.GroupVersionResource
		kind string
	}{
		{apiExports, "APIExport"},
		{apiResourceSchema, "APIResourceSchema"},
		{schema.GroupVersionResource{Group: "core.kcp.io", Version: "v1alpha1", Resource: "logicalclusters"}, "LogicalCluster"},
	}
	shards := []string{"s-a", "s-b"}
	const perShard = 350 // 700 a type: two pages of the mirror's lists
	clients := map[string]*dynamic.DynamicClient{}
	for _, shard := range shards {
		cfg := a.srv.ShardConfig(t, shard)
		cfg.Host += kcpcache.ScopedPathPrefix(kcpcache.Scope{Shard: shard, Cluster: "root"})
		c, err := dynamic.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		clients[shard] = c
	}
	total := len(types) * len(shards) * perShard
	create := func(from, to int) {
		var next atomic.Int64
		next.Store(int64(from))
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for range 8 {
			wg.Go(func() {
				for i := int(next.Add(1) - 1); i < to; i = int(next.Add(1) - 1) {
					ty, shard := types[i%len(types)], shards[(i/len(types))%len(shards)]
					u := newObject(ty.gvr, ty.kind, "", fmt.Sprintf("obj-%05d", i), map[string]interface{}{"i": int64(i)})
					u.SetAnnotations(map[string]string{"example.dev/note": fmt.Sprint(i)})
					if _, err := clients[shard].Resource(ty.gvr).Create(ctx, u, metav1.CreateOptions{}); err != nil {
						errs <- fmt.Errorf("%s %s: %w", ty.gvr.Resource, u.GetName(), err)
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	// A shard's first write asks every cache whether it is homed there
	// (package homes): one object of each type and shard while b is up,
	// the rest while it is stopped, so that b's next start is a first
	// copy of nearly everything.
	create(0, len(types)*len(shards))
	b.stop(t)
	create(len(types)*len(shards), total)
	b.start(t, ctx)

	for _, ty := range types {
		home, err := dyn(t, a.srv, kcpcache.Wildcard, kcpcache.Wildcard).Resource(ty.gvr).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(home.Items) != total/len(types) {
			t.Fatalf("the home holds %d %s, want %d", len(home.Items), ty.gvr.Resource, total/len(types))
		}
		cachetest.Eventually(t, fmt.Sprintf("b holds an exact copy of every %s", ty.gvr.Resource), func(ctx context.Context) error {
			// A consistent read: served once the mirror has applied the
			// home's revision, which it reaches only once the whole list
			// is written.
			copies, err := dynBookkeeping(t, b.srv, kcpcache.Wildcard, kcpcache.Wildcard).Resource(ty.gvr).List(ctx, metav1.ListOptions{})
			if err != nil {
				return err
			}
			return sameCopies(home.Items, copies.Items, "a")
		})
	}
}

// sameCopies reports how copies differ from the home's objects: one copy
// of each, with the home's uid, creation time, managed fields, spec and
// annotations, and the copy bookkeeping naming home and the object's
// resourceVersion there.
func sameCopies(home, copies []unstructured.Unstructured, homeName string) error {
	if len(copies) != len(home) {
		return fmt.Errorf("%d copies of %d objects", len(copies), len(home))
	}
	byKey := map[string]unstructured.Unstructured{}
	for _, c := range copies {
		byKey[partitionOf(c)] = c
	}
	for _, h := range home {
		c, ok := byKey[partitionOf(h)]
		switch {
		case !ok:
			return fmt.Errorf("%s: no copy", partitionOf(h))
		case c.GetUID() != h.GetUID():
			return fmt.Errorf("%s: uid %s, the home's %s", partitionOf(h), c.GetUID(), h.GetUID())
		case !c.GetCreationTimestamp().Time.Equal(h.GetCreationTimestamp().Time):
			return fmt.Errorf("%s: created %v, at the home %v", partitionOf(h), c.GetCreationTimestamp(), h.GetCreationTimestamp())
		case !reflect.DeepEqual(c.GetManagedFields(), h.GetManagedFields()):
			return fmt.Errorf("%s: managedFields %v, the home's %v", partitionOf(h), c.GetManagedFields(), h.GetManagedFields())
		case !reflect.DeepEqual(c.Object["spec"], h.Object["spec"]):
			return fmt.Errorf("%s: spec %v, the home's %v", partitionOf(h), c.Object["spec"], h.Object["spec"])
		}
		ca := c.GetAnnotations()
		for k, v := range h.GetAnnotations() {
			if ca[k] != v {
				return fmt.Errorf("%s: annotation %s=%q, at the home %q", partitionOf(h), k, ca[k], v)
			}
		}
		if ca[kcpcache.AnnotationHome] != homeName || ca[kcpcache.AnnotationHomeResourceVersion] != h.GetResourceVersion() {
			return fmt.Errorf("%s: home %q at %q, want %q at %q", partitionOf(h), ca[kcpcache.AnnotationHome], ca[kcpcache.AnnotationHomeResourceVersion], homeName, h.GetResourceVersion())
		}
	}
	return nil
}
