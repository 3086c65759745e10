package replication

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// registration is a handler this controller added to a local informer, which
// outlives the controller and must not keep calling it.
type registration struct {
	informer cache.SharedIndexInformer
	handle   cache.ResourceEventHandlerRegistration
}

// addHandlers connects both sides of every resource to the queue. The
// controller's own cache informers stop with it; handlers on informers it
// does not own (local ones, a host's cache informers) are returned for
// removeHandlers.
func (c *Controller) addHandlers(ctx context.Context) ([]registration, error) {
	var regs []registration
	var errs []error
	for _, gvr := range c.order {
		rs := c.resources[gvr]
		handle, err := rs.source.Informer.AddEventHandler(c.localHandler(ctx, rs))
		if err != nil {
			errs = append(errs, fmt.Errorf("local informer of %s: %w", gvr, err))
		} else {
			regs = append(regs, registration{informer: rs.source.Informer, handle: handle})
		}
		// A host's wildcard informer delivers every shard's copies; only
		// this shard's partition is the controller's business.
		handler := cache.FilteringResourceEventHandler{
			FilterFunc: func(obj interface{}) bool { return inShard(obj, c.shard) },
			Handler:    c.cacheHandler(ctx, rs),
		}
		handle, err = rs.cacheInformer.AddEventHandler(handler)
		if err != nil {
			errs = append(errs, fmt.Errorf("cache informer of %s: %w", gvr, err))
		} else if rs.hostInformer {
			regs = append(regs, registration{informer: rs.cacheInformer, handle: handle})
		}
	}
	return regs, errors.Join(errs...)
}

// removeHandlers detaches the controller from informers it does not own.
func (c *Controller) removeHandlers(ctx context.Context, regs []registration) {
	for _, r := range regs {
		if err := r.informer.RemoveEventHandler(r.handle); err != nil {
			klog.FromContext(ctx).Error(err, "Removing a handler from an informer")
		}
	}
}

// localHandler queues the key of every local event. A change (anything but
// the replay of the initial list or a resync) also starts a lag measurement.
func (c *Controller) localHandler(ctx context.Context, rs *resourceState) cache.ResourceEventHandler {
	enqueue := func(obj interface{}, isChange bool) {
		k, err := keyFor(rs.GVR, obj)
		if err != nil {
			// kcp objects always carry the annotation; one that does not
			// cannot be placed in a partition.
			klog.FromContext(ctx).V(4).Info("Ignoring local object", "err", err)
			return
		}
		if !c.clusterSelected(k.GVR, k.Cluster) {
			return
		}
		if isChange {
			c.lag.observed(k, c.now())
		}
		c.enqueue(k)
	}
	return cache.ResourceEventHandlerDetailedFuncs{
		AddFunc:    func(obj interface{}, isInInitialList bool) { enqueue(obj, !isInInitialList) },
		UpdateFunc: func(oldObj, newObj interface{}) { enqueue(newObj, resourceVersionChanged(oldObj, newObj)) },
		DeleteFunc: func(obj interface{}) { enqueue(obj, true) },
	}
}

// cacheHandler queues the key of every event on the shard's partition but
// the echoes of the controller's own writes, so a copy that someone else
// changed or deleted is repaired, and keeps the objects gauge.
func (c *Controller) cacheHandler(ctx context.Context, rs *resourceState) cache.ResourceEventHandler {
	gauge := objectsGauge.WithLabelValues(rs.label)
	enqueue := func(obj interface{}) {
		k, err := keyFor(rs.GVR, obj)
		if err != nil {
			klog.FromContext(ctx).Error(err, "Ignoring a copy in the cache")
			return
		}
		if m, err := meta.Accessor(obj); err == nil && c.echoes.isEcho(k, m.GetResourceVersion()) {
			return
		}
		c.enqueue(k)
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj interface{}) {
			rs.copies.Add(1)
			gauge.Inc()
			enqueue(obj)
		},
		UpdateFunc: func(_, newObj interface{}) { enqueue(newObj) },
		DeleteFunc: func(obj interface{}) {
			rs.copies.Add(-1)
			gauge.Dec()
			enqueue(obj)
		},
	}
}

// resourceVersionChanged tells an update from a resync, which redelivers an
// unchanged object.
func resourceVersionChanged(oldObj, newObj interface{}) bool {
	o, errO := meta.Accessor(oldObj)
	n, errN := meta.Accessor(newObj)
	return errO != nil || errN != nil || o.GetResourceVersion() != n.GetResourceVersion()
}
