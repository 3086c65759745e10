package replication

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/client"
)

// partitionIndex finds a copy by shard, cluster, namespace and name in any
// cache informer: the controller's own (scoped to its shard) or a host's
// wildcard one, whatever key function its store uses (kcp's key by cluster,
// namespace and name only).
const partitionIndex = "kcp-cache-replication-partition"

func partitionIndexFunc(obj interface{}) ([]string, error) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, err
	}
	a := m.GetAnnotations()
	return []string{client.ToKey(a[kcpcache.AnnotationShard], a[kcpcache.AnnotationCluster], m.GetNamespace(), m.GetName())}, nil
}

// addPartitionIndex adds the index unless the informer has it already (a
// host's informer shared by several controllers).
func addPartitionIndex(inf cache.SharedIndexInformer) error {
	if _, ok := inf.GetIndexer().GetIndexers()[partitionIndex]; ok {
		return nil
	}
	return inf.AddIndexers(cache.Indexers{partitionIndex: partitionIndexFunc})
}

// inShard reports whether a cache object (or its tombstone) is a copy in
// shard's partition.
func inShard(obj interface{}, shard string) bool {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	m, err := meta.Accessor(obj)
	return err == nil && m.GetAnnotations()[kcpcache.AnnotationShard] == shard
}

// copyFromIndex returns the copy under k in shard's partition, or nil.
func copyFromIndex(inf cache.SharedIndexInformer, shard string, k Key) (*unstructured.Unstructured, error) {
	objs, err := inf.GetIndexer().ByIndex(partitionIndex, client.ToKey(shard, k.Cluster, k.Namespace, k.Name))
	if err != nil || len(objs) == 0 {
		return nil, err
	}
	u, ok := objs[0].(*unstructured.Unstructured)
	if !ok {
		return nil, fmt.Errorf("cache informer of %s holds a %T", k.GVR, objs[0])
	}
	return u, nil
}
