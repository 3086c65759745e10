package replication

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

// failuresBeforeError is how many times a key fails quietly (at V(2)) before
// each further failure is logged as an error: conflicts and a cache restart
// cause a few retries in normal operation.
const failuresBeforeError = 5

// processNextItem reconciles one key from the queue; false means the queue
// has shut down.
func (c *Controller) processNextItem(ctx context.Context) bool {
	k, shutdown := c.queue.Get()
	if shutdown {
		return false
	}
	defer c.queue.Done(k)

	rs := c.resources[k.GVR]
	logger := klog.FromContext(ctx).WithValues("gvr", resourceArg(k.GVR), "cluster", k.Cluster, "namespace", k.Namespace, "name", k.Name)
	ctx = klog.NewContext(ctx, logger)

	changedAt, measuring := c.lag.claim(k)
	generation := c.pending.claim(k)
	act, err := c.reconcile(ctx, k)
	if err != nil {
		if measuring {
			c.lag.unclaim(k, changedAt)
		}
		if ctx.Err() != nil {
			// Shutting down: the failure says nothing about the cache.
			return true
		}
		reconcilesTotal.WithLabelValues(rs.label, "error").Inc()
		if failures := c.queue.NumRequeues(k); failures < failuresBeforeError {
			logger.V(2).Info("Replication failed; retrying", "err", err, "failures", failures+1)
		} else {
			logger.Error(err, "Replication failed; retrying", "failures", failures+1)
		}
		c.queue.AddRateLimited(k)
		return true
	}
	c.queue.Forget(k)
	c.pending.done(k, generation)
	reconcilesTotal.WithLabelValues(rs.label, string(act)).Inc()
	if measuring && act != actionNone {
		lag := c.now().Sub(changedAt)
		lagSeconds.WithLabelValues(rs.label).Observe(lag.Seconds())
		c.observeLag(k.GVR, lag)
	}
	c.initial.finished(k)
	return true
}

// reconcile brings one copy in line with its local object and says what it
// did. Any error means "try again later".
func (c *Controller) reconcile(ctx context.Context, k Key) (_ action, err error) {
	local, err := c.getLocal(k)
	if err != nil {
		return actionNone, err
	}
	cached, err := c.getCopy(k)
	if err != nil {
		return actionNone, err
	}
	d := decide(c.shard, local, cached)
	logger := klog.FromContext(ctx)
	defer func() {
		if err == nil && local != nil {
			c.resources[k.GVR].newest.observe(local.GetResourceVersion())
		}
	}()
	switch d.action {
	case actionNone:
		logger.V(5).Info("Copy needs no change", "reason", d.reason)
		return d.action, nil
	case actionCreate:
		err = c.createCopy(ctx, k, d.object)
	case actionUpdate:
		err = c.updateCopy(ctx, k, d.object)
	case actionDelete:
		err = c.deleteCopy(ctx, k, d.deleteUID)
		if apierrors.IsNotFound(err) {
			// Someone else deleted it first; the outcome is the same.
			err = nil
		}
	case actionRecreate:
		err = c.deleteCopy(ctx, k, d.deleteUID)
		if err == nil || apierrors.IsNotFound(err) {
			err = c.createCopy(ctx, k, d.object)
		}
	}
	if err != nil {
		return d.action, fmt.Errorf("%s (%s): %w", verb(d.action), d.reason, err)
	}
	if d.originRegressed {
		// The origin is the truth, so its older object is mirrored; but a
		// shard restored from a backup lost whatever changed since, and
		// consumers should know.
		c.regressions.Add(1)
		originRegressionsTotal.WithLabelValues(c.resources[k.GVR].label).Inc()
		logger.Info("Warning: the shard's object is older than its copy in the cache (the shard went back in time, e.g. restored from a backup); mirroring the shard's object",
			"originResourceVersion", local.GetResourceVersion(), "copyOriginResourceVersion", cached.GetAnnotations()[kcpcache.AnnotationOriginalResourceVersion])
	}
	logger.V(4).Info("Replicated", "action", d.action, "reason", d.reason)
	return d.action, nil
}

// verb names an action in an error message.
func verb(a action) string {
	switch a {
	case actionCreate:
		return "creating the copy"
	case actionUpdate:
		return "updating the copy"
	case actionDelete:
		return "deleting the copy"
	case actionRecreate:
		return "replacing the copy"
	}
	return string(a)
}
