package client

import (
	"errors"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"
)

// Fallback looks objects up in a shard's own informer first and in a cache
// informer second, the way kcp shards resolve APIExports that may live on
// another shard. Both indexers need the indexes of Indexers and must hold
// *unstructured.Unstructured objects.
//
// Only a miss falls through to the cache. Any other error from the local
// indexer (a missing index, an ambiguous match) is returned as is: answering
// from the cache then would hide a broken local view.
type Fallback struct {
	// Local is the shard's own indexer; nil means the cache alone is asked.
	Local cache.Indexer
	// Cache is the indexer of an informer on the kcp-cache server.
	Cache cache.Indexer
	// Resource names the resource in NotFound errors.
	Resource schema.GroupResource
}

// GetByClusterAndName returns the object in cluster with name (or
// namespace/name) from Local, else from Cache. A miss in both is an apierrors
// NotFound for Resource.
func (f Fallback) GetByClusterAndName(cluster, name string) (*unstructured.Unstructured, error) {
	return f.get(name, func(idx cache.Indexer) (*unstructured.Unstructured, error) {
		return GetByClusterAndName(idx, cluster, name)
	})
}

// GetByPathAndName returns the object with workspace path and name (or
// namespace/name) from Local, else from Cache, with the errors of
// GetByClusterAndName.
func (f Fallback) GetByPathAndName(path, name string) (*unstructured.Unstructured, error) {
	return f.get(name, func(idx cache.Indexer) (*unstructured.Unstructured, error) {
		return GetByPathAndName(idx, path, name)
	})
}

// ListByCluster returns the objects in cluster from Local when it has any,
// else from Cache. A logical cluster lives on one shard, so a non-empty local
// answer is complete and the cache's copies of it would only be older.
func (f Fallback) ListByCluster(cluster string) ([]*unstructured.Unstructured, error) {
	if f.Local != nil {
		objs, err := ListByCluster(f.Local, cluster)
		if err != nil || len(objs) > 0 {
			return objs, err
		}
	}
	if f.Cache == nil {
		return nil, errNoCache
	}
	return ListByCluster(f.Cache, cluster)
}

var errNoCache = errors.New("fallback has no cache indexer")

func (f Fallback) get(name string, lookup func(cache.Indexer) (*unstructured.Unstructured, error)) (*unstructured.Unstructured, error) {
	if f.Local != nil {
		obj, err := lookup(f.Local)
		if err == nil || !apierrors.IsNotFound(err) {
			return obj, err
		}
	}
	if f.Cache == nil {
		return nil, errNoCache
	}
	obj, err := lookup(f.Cache)
	if apierrors.IsNotFound(err) {
		return nil, apierrors.NewNotFound(f.Resource, name)
	}
	return obj, err
}
