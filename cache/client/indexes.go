package client

import (
	"errors"
	"fmt"
	"sort"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

const (
	// IndexByCluster indexes objects by their kcp.io/cluster annotation.
	IndexByCluster = "kcp-cache-by-cluster"
	// IndexByClusterAndName indexes objects by ClusterAndNameIndexValue.
	IndexByClusterAndName = "kcp-cache-by-cluster-and-name"
	// IndexByShard indexes objects by their kcp.io/shard annotation.
	IndexByShard = "kcp-cache-by-shard"
	// IndexByPathAndName indexes objects that carry a kcp.io/path annotation
	// by PathAndNameIndexValue; objects without it are not in this index.
	IndexByPathAndName = "kcp-cache-by-path-and-name"
)

// ErrAmbiguous is wrapped by lookups that expect one object and find several,
// for example when two shards both hold copies for one logical cluster. The
// caller decides what that means; picking one silently could read stale data.
var ErrAmbiguous = errors.New("more than one object matches")

// Indexers returns the indexes every informer of this package carries. Add
// them to a local informer too (AddIndexers) to use it with Fallback.
func Indexers() cache.Indexers {
	return cache.Indexers{
		IndexByCluster:        indexByCluster,
		IndexByClusterAndName: indexByClusterAndName,
		IndexByShard:          indexByShard,
		IndexByPathAndName:    indexByPathAndName,
	}
}

// ClusterAndNameIndexValue is the IndexByClusterAndName value of an object.
// name is the object's name, or namespace/name for a namespaced object.
func ClusterAndNameIndexValue(cluster, name string) string {
	return cluster + keySeparator + name
}

// PathAndNameIndexValue is the IndexByPathAndName value of an object. path is
// a workspace path such as root:org:ws; name is as for ClusterAndNameIndexValue.
func PathAndNameIndexValue(path, name string) string {
	return path + keySeparator + name
}

// GetByClusterAndName returns the one object in cluster with name (or
// namespace/name). A miss is an apierrors NotFound without a resource;
// several matches wrap ErrAmbiguous.
func GetByClusterAndName(indexer cache.Indexer, cluster, name string) (*unstructured.Unstructured, error) {
	return getOne(indexer, IndexByClusterAndName, ClusterAndNameIndexValue(cluster, name), name)
}

// GetByPathAndName returns the one object with the kcp.io/path annotation path
// and name (or namespace/name), with the errors of GetByClusterAndName.
func GetByPathAndName(indexer cache.Indexer, path, name string) (*unstructured.Unstructured, error) {
	return getOne(indexer, IndexByPathAndName, PathAndNameIndexValue(path, name), name)
}

// ListByCluster returns every object in cluster, from every shard.
func ListByCluster(indexer cache.Indexer, cluster string) ([]*unstructured.Unstructured, error) {
	return listByIndex(indexer, IndexByCluster, cluster)
}

// ListByShard returns every object that shard owns.
func ListByShard(indexer cache.Indexer, shard string) ([]*unstructured.Unstructured, error) {
	return listByIndex(indexer, IndexByShard, shard)
}

func indexByCluster(obj interface{}) ([]string, error) {
	return annotationIndex(obj, kcpcache.AnnotationCluster)
}

func indexByShard(obj interface{}) ([]string, error) {
	return annotationIndex(obj, kcpcache.AnnotationShard)
}

func indexByClusterAndName(obj interface{}) ([]string, error) {
	return annotationAndNameIndex(obj, kcpcache.AnnotationCluster)
}

func indexByPathAndName(obj interface{}) ([]string, error) {
	return annotationAndNameIndex(obj, kcpcache.AnnotationPath)
}

// annotationIndex indexes by one annotation; objects without it are left out
// rather than filed under "".
func annotationIndex(obj interface{}, annotation string) ([]string, error) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, err
	}
	v := m.GetAnnotations()[annotation]
	if v == "" {
		return nil, nil
	}
	return []string{v}, nil
}

// annotationAndNameIndex indexes by an annotation plus [namespace/]name.
func annotationAndNameIndex(obj interface{}, annotation string) ([]string, error) {
	values, err := annotationIndex(obj, annotation)
	if err != nil || len(values) == 0 {
		return values, err
	}
	m, _ := meta.Accessor(obj) // annotationIndex has checked it
	return []string{values[0] + keySeparator + cache.ObjectName{Namespace: m.GetNamespace(), Name: m.GetName()}.String()}, nil
}

func getOne(indexer cache.Indexer, index, value, name string) (*unstructured.Unstructured, error) {
	objs, err := listByIndex(indexer, index, value)
	if err != nil {
		return nil, err
	}
	switch len(objs) {
	case 0:
		return nil, apierrors.NewNotFound(schema.GroupResource{}, name)
	case 1:
		return objs[0], nil
	}
	keys := make([]string, 0, len(objs))
	for _, o := range objs {
		k, _ := KeyFunc(o)
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return nil, fmt.Errorf("%w: %s %q has %d objects: %v", ErrAmbiguous, index, value, len(objs), keys)
}

func listByIndex(indexer cache.Indexer, index, value string) ([]*unstructured.Unstructured, error) {
	objs, err := indexer.ByIndex(index, value)
	if err != nil {
		return nil, err
	}
	out := make([]*unstructured.Unstructured, 0, len(objs))
	for _, o := range objs {
		u, ok := o.(*unstructured.Unstructured)
		if !ok {
			return nil, fmt.Errorf("index %s holds a %T, want *unstructured.Unstructured", index, o)
		}
		out = append(out, u)
	}
	return out, nil
}
