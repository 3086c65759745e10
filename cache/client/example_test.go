package client_test

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/client"
)

// A controller on one kcp shard that reads APIExports of every shard from
// the cache server: one wildcard informer, keys that keep shards and clusters
// apart, and lookups by workspace path.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	cfg, err := client.ConfigFromKubeconfig("/etc/kcp/cache.kubeconfig", "")
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
	if _, err := informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj interface{}) { enqueue(obj) },
		DeleteFunc: enqueue,
	}); err != nil {
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
	if last, watching := informer.Freshness(); !watching {
		fmt.Println("cache view is stale since", last)
	}

	// Workers: split the key, read the copy from the informer's store.
	for queue.Len() > 0 {
		key, shutdown := queue.Get()
		if shutdown {
			return
		}
		shard, cluster, _, name, err := client.SplitKey(key)
		if err == nil {
			if obj, exists, _ := informer.GetIndexer().GetByKey(key); exists {
				fmt.Println("APIExport", name, "of cluster", cluster, "on shard", shard, "is", obj != nil)
			}
		}
		queue.Done(key)
	}

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
}
