package client_test

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/client"
	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
)

// A controller on one kcp shard that reads APIExports of every shard from
// the cache server: one wildcard informer, keys that keep shards and clusters
// apart, and lookups by workspace path.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// A real cache server on loopback; a shard reads the kubeconfig the
	// cache server wrote, here as in production.
	srv, err := cachetest.Start(ctx, cachetest.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() {
		if err := srv.Stop(); err != nil {
			fmt.Println(err)
		}
	}()
	cfg, err := client.ConfigFromKubeconfig(srv.Kubeconfig(), "")
	if err != nil {
		fmt.Println(err)
		return
	}
	cacheClient, err := client.NewForConfig(cfg)
	if err != nil {
		fmt.Println(err)
		return
	}

	apiExports := schema.GroupVersionResource{Group: "apis.kcp.io", Version: "v1alpha1", Resource: "apiexports"}

	// The zero scope is */*: every shard, every logical cluster.
	factory := client.NewInformerFactory(cacheClient, kcpcache.Scope{}, 10*time.Hour)
	defer factory.Shutdown()
	informer := factory.ForResource(apiExports)

	// Queue store keys: "shard|cluster|name" names one copy unambiguously.
	queue := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
	defer queue.ShutDown()
	enqueue := func(obj interface{}) {
		if key, err := client.KeyFunc(obj); err == nil {
			queue.Add(key)
		}
	}
	registration, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj interface{}) { enqueue(obj) },
		DeleteFunc: enqueue,
	})
	if err != nil {
		fmt.Println(err)
		return
	}

	factory.Start(ctx)
	for gvr, synced := range factory.WaitForCacheSync(ctx) {
		if !synced {
			fmt.Println("cache did not sync:", gvr)
			return
		}
	}
	// The handler runs on its own goroutine: wait until it has seen the
	// initial list before draining the queue.
	if !cache.WaitForCacheSync(ctx.Done(), registration.HasSynced) {
		fmt.Println("handler did not sync")
		return
	}
	// Freshness says how old the view is; a controller would report a
	// view that stays stale (not watching) as degraded.
	if last, _ := informer.Freshness(); last.IsZero() {
		fmt.Println("cache view never synced")
	}

	// Shard amber's replication pushes a copy: one APIExport of
	// the logical cluster 2x9j3n5h, whose workspace path is root:org:team.
	pushed := &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": "apis.kcp.io/v1alpha1",
		"kind":       "APIExport",
		"metadata": map[string]interface{}{
			"name":        "kubernetes",
			"annotations": map[string]interface{}{kcpcache.AnnotationPath: "root:org:team"},
		},
	}}
	if _, err := cacheClient.Cluster("amber", "2x9j3n5h").Resource(apiExports).Create(ctx, pushed, metav1.CreateOptions{}); err != nil {
		fmt.Println(err)
		return
	}

	// A worker: the watch delivers the new copy; split its key and read
	// the copy from the informer's store.
	go func() {
		<-ctx.Done()
		queue.ShutDown()
	}()
	key, shutdown := queue.Get()
	if shutdown {
		fmt.Println("no event before the deadline")
		return
	}
	shard, cluster, _, name, err := client.SplitKey(key)
	if err == nil {
		if obj, exists, _ := informer.GetIndexer().GetByKey(key); exists {
			fmt.Println("APIExport", name, "of cluster", cluster, "on shard", shard, "is", obj != nil)
		}
	}
	queue.Done(key)

	// Binding resolution: the shard's own informer first, the cache second.
	// A shard would pass its local APIExport indexer as Local.
	lookup := client.Fallback{Cache: informer.GetIndexer(), Resource: apiExports.GroupResource()}
	export, err := lookup.GetByPathAndName("root:org:team", "kubernetes")
	switch {
	case apierrors.IsNotFound(err):
		fmt.Println("no such APIExport")
	case err != nil:
		fmt.Println("lookup failed:", err)
	default:
		fmt.Println("found", export.GetName(), "on shard", export.GetAnnotations()[kcpcache.AnnotationShard])
	}
	// Output:
	// APIExport kubernetes of cluster 2x9j3n5h on shard amber is true
	// found kubernetes on shard amber
}
