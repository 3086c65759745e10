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
		state, err := p.purge(ctx, name)
		switch {
		case err != nil:
			logger.Error(err, "Purging the objects of a deleted CRD", "crd", name)
			queue.AddRateLimited(name)
		case state == purged:
			// Deleted what was there; look again until the CRD is gone,
			// in case more arrived meanwhile.
			queue.AddAfter(name, time.Second)
			queue.Forget(name)
		case state == empty:
			// Nothing there now, but the CRD is still Terminating: an
			// object may still arrive (a shard's create that raced the
			// deletion), and upstream's finalizer, once past its first
			// list, only polls for it to disappear (every 5 s for a
			// minute) without changing the CRD, so no event would bring
			// the CRD back to this queue.
			queue.AddAfter(name, terminatingRecheck)
			queue.Forget(name)
		default:
			queue.Forget(name)
		}
		queue.Done(name)
	}
}

// purgeState is what purge found.
type purgeState int

const (
	// done: the CRD is gone or not being deleted.
	done purgeState = iota
	// empty: the CRD is Terminating and has no objects.
	empty
	// purged: the CRD is Terminating and its objects were deleted.
	purged
)

// terminatingRecheck is how often an empty Terminating CRD is looked at
// again, until it is gone.
const terminatingRecheck = 2 * time.Second

// purge deletes every object of a Terminating CRD through its partition and
// says what it found.
func (p *CRDPurger) purge(ctx context.Context, name string) (purgeState, error) {
	crd, err := p.informer.Lister().Get(name)
	if apierrors.IsNotFound(err) || (err == nil && crd.DeletionTimestamp == nil) {
		return done, nil
	}
	if err != nil {
		return done, err
	}
	gvr, ok := storedVersion(crd)
	if !ok {
		return done, nil
	}
	everywhere, err := p.client(kcpcache.Scope{Shard: kcpcache.Wildcard, Cluster: kcpcache.Wildcard})
	if err != nil {
		return done, err
	}
	list, err := everywhere.Resource(gvr).List(ctx, metav1.ListOptions{})
	if err != nil {
		return done, fmt.Errorf("listing %s: %w", gvr.GroupResource(), err)
	}
	for _, obj := range list.Items {
		a := obj.GetAnnotations()
		scope, err := kcpcache.NewScope(a[kcpcache.AnnotationShard], a[kcpcache.AnnotationCluster])
		if err != nil || scope.IsWildcard() {
			return purged, fmt.Errorf("%s %q has no valid partition annotations: %v", gvr.GroupResource(), obj.GetName(), err)
		}
		c, err := p.client(scope)
		if err != nil {
			return purged, err
		}
		err = c.Resource(gvr).Namespace(obj.GetNamespace()).Delete(ctx, obj.GetName(), metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return purged, fmt.Errorf("deleting %s %s/%s in %s: %w", gvr.GroupResource(), obj.GetNamespace(), obj.GetName(), scope, err)
		}
		klog.FromContext(ctx).V(2).Info("Purged an object of a deleted CRD", "crd", name, "partition", scope.String(), "namespace", obj.GetNamespace(), "name", obj.GetName())
	}
	if len(list.Items) == 0 {
		return empty, nil
	}
	return purged, nil
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
