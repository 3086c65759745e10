package dataplane

import (
	"context"
	"errors"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// WatchCRDs keeps the registry in step with the CRDs informer sees: an
// Established CRD that is not being deleted is served, anything else is not.
// Until the informer has synced, the registry counts it as a pending source:
// waitSynced, which the caller runs once the informer starts, waits for that
// (or for its ctx to end). Call WatchCRDs before the informer starts.
func (r *Registry) WatchCRDs(ctx context.Context, informer cache.SharedIndexInformer) (waitSynced func(context.Context), err error) {
	logger := klog.FromContext(ctx).WithName("crd-source")
	ctx = klog.NewContext(ctx, logger)
	apply := func(obj interface{}) {
		crd, ok := obj.(*apiextensionsv1.CustomResourceDefinition)
		if !ok {
			return
		}
		res := ResourceFromCRD(crd)
		if !IsEstablished(crd) || crd.DeletionTimestamp != nil {
			r.Unregister(ctx, res.GroupResource())
			return
		}
		if err := r.Register(ctx, res); err != nil && !errors.Is(err, errShuttingDown) {
			logger.Error(err, "Cannot serve the type a CRD declares", "crd", crd.Name)
		}
	}
	remove := func(obj interface{}) {
		if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		crd, ok := obj.(*apiextensionsv1.CustomResourceDefinition)
		if !ok {
			return
		}
		r.Unregister(ctx, schema.GroupResource{Group: crd.Spec.Group, Resource: ResourceFromCRD(crd).Resource})
	}
	store := informer.GetStore()
	r.crds.Store(&store)
	synced := r.AddSource()
	reg, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    apply,
		UpdateFunc: func(_, obj interface{}) { apply(obj) },
		DeleteFunc: remove,
	})
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) {
		if cache.WaitForCacheSync(ctx.Done(), reg.HasSynced) {
			synced()
			logger.V(2).Info("Every CRD is known")
		}
	}, nil
}

// IsEstablished reports whether crd's Established condition is true.
func IsEstablished(crd *apiextensionsv1.CustomResourceDefinition) bool {
	for _, c := range crd.Status.Conditions {
		if c.Type == apiextensionsv1.Established {
			return c.Status == apiextensionsv1.ConditionTrue
		}
	}
	return false
}

// establishedCRD reports whether the CRD informer holds an Established CRD
// of gr that is not being deleted.
func (r *Registry) establishedCRD(gr schema.GroupResource) bool {
	store := r.crds.Load()
	if store == nil {
		return false
	}
	obj, ok, err := (*store).GetByKey(gr.String())
	if err != nil || !ok {
		return false
	}
	crd, ok := obj.(*apiextensionsv1.CustomResourceDefinition)
	return ok && IsEstablished(crd) && crd.DeletionTimestamp == nil
}
