package removal

import (
	"context"
	"fmt"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsinformers "k8s.io/apiextensions-apiserver/pkg/client/informers/externalversions/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/client"
)

// CRDPurger deletes the remaining objects of CRDs being deleted, each
// through its own partition. Upstream's CRD finalizer deletes a CRD's
// objects with a context that names no partition, which storage refuses;
// a CRD whose objects appeared after the in-use check (a shard's create
// racing the deletion) would stay Terminating forever. Once the purger has
// emptied every partition, the finalizer finds nothing and completes.
type CRDPurger struct {
	informer apiextensionsinformers.CustomResourceDefinitionInformer
	loopback *rest.Config
}

// NewCRDPurger purges the CRDs informer sees being deleted, through the
// server's loopback client (system:masters); Run does it.
func NewCRDPurger(informer apiextensionsinformers.CustomResourceDefinitionInformer, loopback *rest.Config) *CRDPurger {
	return &CRDPurger{informer: informer, loopback: loopback}
}

// Run works until ctx is done, then shuts its queue down and stops
// following the informer.
func (p *CRDPurger) Run(ctx context.Context) {
	logger := klog.FromContext(ctx).WithName("crd-purger")
	ctx = klog.NewContext(ctx, logger)
	queue := workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "crd-purger"})
	defer queue.ShutDown()
	enqueue := func(obj interface{}) {
		if crd, ok := obj.(*apiextensionsv1.CustomResourceDefinition); ok && crd.DeletionTimestamp != nil {
			queue.Add(crd.Name)
		}
	}
	reg, err := p.informer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj interface{}) { enqueue(obj) },
	})
	if err != nil {
		logger.Error(err, "Following the CRDs; deleted CRDs' objects are not purged")
		return
	}
	defer func() { _ = p.informer.Informer().RemoveEventHandler(reg) }()
	stopped := context.AfterFunc(ctx, queue.ShutDown)
	defer stopped()
	for {
		name, quit := queue.Get()
		if quit {
			return
		}
		remaining, err := p.purge(ctx, name)
		switch {
		case err != nil:
			logger.Error(err, "Purging the objects of a deleted CRD", "crd", name)
			queue.AddRateLimited(name)
		case remaining:
			// Deleted what was there; look again until the CRD is gone,
			// in case more arrived meanwhile.
			queue.AddAfter(name, time.Second)
			queue.Forget(name)
		default:
			queue.Forget(name)
		}
		queue.Done(name)
	}
}

// purge deletes every object of a Terminating CRD through its partition and
// reports whether there were any.
func (p *CRDPurger) purge(ctx context.Context, name string) (bool, error) {
	crd, err := p.informer.Lister().Get(name)
	if apierrors.IsNotFound(err) || (err == nil && crd.DeletionTimestamp == nil) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	gvr, ok := storedVersion(crd)
	if !ok {
		return false, nil
	}
	everywhere, err := p.client(kcpcache.Scope{Shard: kcpcache.Wildcard, Cluster: kcpcache.Wildcard})
	if err != nil {
		return false, err
	}
	list, err := everywhere.Resource(gvr).List(ctx, metav1.ListOptions{})
	if err != nil {
		return false, fmt.Errorf("listing %s: %w", gvr.GroupResource(), err)
	}
	for _, obj := range list.Items {
		a := obj.GetAnnotations()
		scope, err := kcpcache.NewScope(a[kcpcache.AnnotationShard], a[kcpcache.AnnotationCluster])
		if err != nil || scope.IsWildcard() {
			return true, fmt.Errorf("%s %q has no valid partition annotations: %v", gvr.GroupResource(), obj.GetName(), err)
		}
		c, err := p.client(scope)
		if err != nil {
			return true, err
		}
		err = c.Resource(gvr).Namespace(obj.GetNamespace()).Delete(ctx, obj.GetName(), metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return true, fmt.Errorf("deleting %s %s/%s in %s: %w", gvr.GroupResource(), obj.GetNamespace(), obj.GetName(), scope, err)
		}
		klog.FromContext(ctx).V(2).Info("Purged an object of a deleted CRD", "crd", name, "partition", scope.String(), "namespace", obj.GetNamespace(), "name", obj.GetName())
	}
	return len(list.Items) > 0, nil
}

// client addresses scope with the server's loopback (system:masters).
func (p *CRDPurger) client(scope kcpcache.Scope) (dynamic.Interface, error) {
	c, err := client.ScopedConfig(p.loopback, scope.Shard, scope.Cluster)
	if err != nil {
		return nil, err
	}
	return dynamic.NewForConfig(c)
}

func storedVersion(crd *apiextensionsv1.CustomResourceDefinition) (schema.GroupVersionResource, bool) {
	for _, v := range crd.Spec.Versions {
		if v.Storage {
			return schema.GroupVersionResource{Group: crd.Spec.Group, Version: v.Name, Resource: crd.Spec.Names.Plural}, true
		}
	}
	return schema.GroupVersionResource{}, false
}
