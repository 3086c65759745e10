package replication

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
)

// fieldManager names the controller to the cache server's field manager. A
// kcp-cache server keeps the origin's managedFields on copies and records no
// writer; other servers record the controller under this name.
const fieldManager = "kcp-cache-replication"

// getLocalFromSource returns the shard's object under k if it is selected
// (its cluster is replicated and the resource's filter takes it), else nil.
func (c *Controller) getLocalFromSource(k Key) (*unstructured.Unstructured, error) {
	if !c.clusterSelected(k.GVR, k.Cluster) {
		return nil, nil
	}
	rs := c.resources[k.GVR]
	obj, err := rs.source.Get(k.Cluster, k.Namespace, k.Name)
	if apierrors.IsNotFound(err) || (err == nil && obj == nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("looking up the local object: %w", err)
	}
	u, err := toUnstructured(obj, k.GVR, rs.Kind)
	if err != nil {
		return nil, err
	}
	if rs.Filter != nil && !rs.Filter(u) {
		return nil, nil
	}
	return u, nil
}

// getCopyFromInformer returns the copy under k from the cache informer, or
// nil. The informer may lag behind the cache; a write based on a stale copy
// fails with a conflict and is retried.
func (c *Controller) getCopyFromInformer(k Key) (*unstructured.Unstructured, error) {
	return copyFromIndex(c.resources[k.GVR].cacheInformer, c.shard, k)
}

// copies is the dynamic client for the copies of k's resource in k's
// cluster and namespace of the shard's partition.
func (c *Controller) copies(k Key) dynamic.ResourceInterface {
	return c.cacheClient.Cluster(c.shard, k.Cluster).Resource(k.GVR).Namespace(k.Namespace)
}

func (c *Controller) createInCache(ctx context.Context, k Key, obj *unstructured.Unstructured) error {
	out, err := c.copies(k).Create(ctx, obj, metav1.CreateOptions{FieldManager: fieldManager})
	if err == nil {
		c.echoes.wrote(k, out.GetResourceVersion())
	}
	return err
}

func (c *Controller) updateInCache(ctx context.Context, k Key, obj *unstructured.Unstructured) error {
	out, err := c.copies(k).Update(ctx, obj, metav1.UpdateOptions{FieldManager: fieldManager})
	if err == nil {
		c.echoes.wrote(k, out.GetResourceVersion())
	}
	return err
}

// deleteFromCache deletes the copy under k, only if it still has uid (when
// uid is known): a copy written since we looked is left for the next
// reconcile to judge.
func (c *Controller) deleteFromCache(ctx context.Context, k Key, uid types.UID) error {
	opts := metav1.DeleteOptions{}
	if uid != "" {
		opts.Preconditions = &metav1.Preconditions{UID: &uid}
	}
	return c.copies(k).Delete(ctx, k.Name, opts)
}
