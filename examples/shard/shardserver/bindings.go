package shardserver

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/client"
)

var (
	// APIExports and APIBindings are the kcp types the example uses.
	APIExports  = schema.GroupVersionResource{Group: "apis.kcp.io", Version: "v1alpha1", Resource: "apiexports"}
	APIBindings = schema.GroupVersionResource{Group: "apis.kcp.io", Version: "v1alpha1", Resource: "apibindings"}
)

// BindingController resolves every APIBinding's spec.reference.export
// ({cluster, name}; cluster defaults to the binding's own) to an APIExport,
// from the shard's own objects first and from the cache when the export
// lives on another shard, and records the outcome in the binding's status:
// phase Bound with the export's shard, uid and source, or phase Pending.
type BindingController struct {
	shard      string
	bindings   *client.Informer
	exports    client.Fallback
	localWrite *client.ClusterClient
	queue      workqueue.TypedRateLimitingInterface[string]
}

// NewBindingController wires the controller to the shard's own informers
// (local), the cache's global informers and a client for the shard's own API.
func NewBindingController(shard string, local, global *client.InformerFactory, localWrite *client.ClusterClient) *BindingController {
	c := &BindingController{
		shard:    shard,
		bindings: local.ForResource(APIBindings),
		exports: client.Fallback{
			Local:    local.ForResource(APIExports).GetIndexer(),
			Cache:    global.ForResource(APIExports).GetIndexer(),
			Resource: APIExports.GroupResource(),
		},
		localWrite: localWrite,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "apibindings"}),
	}
	enqueue := func(obj interface{}) {
		if key, err := client.KeyFunc(obj); err == nil {
			c.queue.Add(key)
		}
	}
	_, _ = c.bindings.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj interface{}) { enqueue(obj) },
	})
	// An export appearing or vanishing anywhere may change any binding.
	all := func(interface{}) {
		for _, key := range c.bindings.GetIndexer().ListKeys() {
			c.queue.Add(key)
		}
	}
	exportHandler := cache.ResourceEventHandlerFuncs{AddFunc: all, UpdateFunc: func(_, o interface{}) { all(o) }, DeleteFunc: all}
	_, _ = local.ForResource(APIExports).AddEventHandler(exportHandler)
	_, _ = global.ForResource(APIExports).AddEventHandler(exportHandler)
	return c
}

// Run processes bindings until ctx is done.
func (c *BindingController) Run(ctx context.Context) {
	defer utilruntime.HandleCrashWithContext(ctx)
	defer c.queue.ShutDown()
	logger := klog.FromContext(ctx).WithName("apibindings")
	ctx = klog.NewContext(ctx, logger)
	if !cache.WaitForCacheSync(ctx.Done(), c.bindings.HasSynced) {
		return
	}
	go func() {
		for c.processNext(ctx) {
		}
	}()
	<-ctx.Done()
}

func (c *BindingController) processNext(ctx context.Context) bool {
	key, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(key)
	if err := c.reconcile(ctx, key); err != nil {
		klog.FromContext(ctx).V(2).Info("Retrying APIBinding", "key", key, "err", err)
		c.queue.AddRateLimited(key)
		return true
	}
	c.queue.Forget(key)
	return true
}

func (c *BindingController) reconcile(ctx context.Context, key string) error {
	obj, exists, err := c.bindings.GetIndexer().GetByKey(key)
	if err != nil || !exists {
		return err
	}
	binding := obj.(*unstructured.Unstructured)
	cluster := binding.GetAnnotations()[kcpcache.AnnotationCluster]
	status := c.resolve(binding, cluster)
	if current, _, _ := unstructured.NestedMap(binding.Object, "status"); equality.Semantic.DeepEqual(current, status) {
		return nil
	}
	updated := binding.DeepCopy()
	if err := unstructured.SetNestedMap(updated.Object, status, "status"); err != nil {
		return err
	}
	_, err = c.localWrite.Cluster(c.shard, cluster).Resource(APIBindings).Update(ctx, updated, metav1.UpdateOptions{})
	if err == nil {
		klog.FromContext(ctx).Info("APIBinding resolved", "cluster", cluster, "name", binding.GetName(), "phase", status["phase"], "source", status["source"])
	}
	return err
}

// resolve computes a binding's status from the export lookup.
func (c *BindingController) resolve(binding *unstructured.Unstructured, cluster string) map[string]interface{} {
	refCluster, _, _ := unstructured.NestedString(binding.Object, "spec", "reference", "export", "cluster")
	refName, _, _ := unstructured.NestedString(binding.Object, "spec", "reference", "export", "name")
	if refCluster == "" {
		refCluster = cluster
	}
	if refName == "" {
		return map[string]interface{}{"phase": "Pending", "message": "spec.reference.export.name is empty"}
	}
	export, err := c.exports.GetByClusterAndName(refCluster, refName)
	switch {
	case apierrors.IsNotFound(err):
		return map[string]interface{}{"phase": "Pending", "message": fmt.Sprintf("APIExport %s|%s not found locally or in the cache", refCluster, refName)}
	case err != nil:
		return map[string]interface{}{"phase": "Pending", "message": err.Error()}
	}
	owner := export.GetAnnotations()[kcpcache.AnnotationShard]
	source := "cache"
	if owner == c.shard {
		source = "local"
	}
	return map[string]interface{}{
		"phase":  "Bound",
		"source": source,
		"export": map[string]interface{}{
			"cluster": refCluster,
			"name":    refName,
			"shard":   owner,
			"uid":     string(export.GetUID()),
		},
	}
}
