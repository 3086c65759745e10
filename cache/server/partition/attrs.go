package partition

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/client-go/tools/cache"
)

const (
	// FieldShard and FieldCluster are synthetic fields, set on every object's
	// attributes, that wildcard scopes filter on where a key prefix cannot
	// express them ("*/c", or any namespace filter below a wildcard). Clients
	// cannot select on them: custom resource field selectors are validated
	// before storage sees them.
	FieldShard   = "cache.kcp.io/shard"
	FieldCluster = "cache.kcp.io/cluster"
)

// withPartitionFields extends an attribute function with FieldShard and
// FieldCluster. The cacher precomputes attributes with it; the etcd path calls
// it through the predicate.
func withPartitionFields(attrs storage.AttrFunc) storage.AttrFunc {
	return func(obj runtime.Object) (labels.Set, fields.Set, error) {
		l, f, err := attrs(obj)
		if err != nil {
			return nil, nil, err
		}
		m, err := meta.Accessor(obj)
		if err != nil {
			return nil, nil, err
		}
		shard, cluster := partitionAnnotations(obj, m)
		out := make(fields.Set, len(f)+2)
		for k, v := range f {
			out[k] = v
		}
		out[FieldShard] = shard
		out[FieldCluster] = cluster
		return l, out, nil
	}
}

// clusterIndexName is the watch cache index that makes "*/c" lists read only
// the objects of cluster c instead of scanning the whole resource.
var clusterIndexName = storage.FieldIndex(FieldCluster)

func indexByCluster(obj interface{}) ([]string, error) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, err
	}
	o, ok := obj.(runtime.Object)
	if !ok {
		return nil, fmt.Errorf("cannot index %T by cluster", obj)
	}
	_, cluster := partitionAnnotations(o, m)
	return []string{cluster}, nil
}

// withClusterIndex returns a copy of indexers with the cluster index added.
func withClusterIndex(indexers *cache.Indexers) *cache.Indexers {
	out := cache.Indexers{}
	if indexers != nil {
		for k, v := range *indexers {
			out[k] = v
		}
	}
	out[clusterIndexName] = indexByCluster
	return &out
}
