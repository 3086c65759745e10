package client

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/tools/cache"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

// keySeparator separates shard, cluster and the namespace/name key. Neither
// shard nor cluster names may contain it, so the first two occurrences are
// always the separators, whatever the object's name holds.
const keySeparator = "|"

// KeyFunc is the store key of the informers in this package:
// "shard|cluster|namespace/name", or "shard|cluster|name" for cluster-scoped
// objects, with shard and cluster read from the kcp.io/shard and
// kcp.io/cluster annotations. Objects with the same name in different shards
// or clusters therefore never collide. Tombstones yield their recorded key.
// An object without the annotations gets empty segments rather than an error:
// a key error would make the whole list fail and the informer never sync.
func KeyFunc(obj interface{}) (string, error) {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		return tombstone.Key, nil
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return "", fmt.Errorf("object has no meta: %w", err)
	}
	annotations := m.GetAnnotations()
	return ToKey(annotations[kcpcache.AnnotationShard], annotations[kcpcache.AnnotationCluster], m.GetNamespace(), m.GetName()), nil
}

// ToKey builds the key KeyFunc would give an object with these coordinates.
func ToKey(shard, cluster, namespace, name string) string {
	return shard + keySeparator + cluster + keySeparator + cache.ObjectName{Namespace: namespace, Name: name}.String()
}

// SplitKey splits a key made by KeyFunc or ToKey into its parts.
func SplitKey(key string) (shard, cluster, namespace, name string, err error) {
	parts := strings.SplitN(key, keySeparator, 3)
	if len(parts) != 3 {
		return "", "", "", "", fmt.Errorf("unexpected key format %q: want shard%scluster%s[namespace/]name", key, keySeparator, keySeparator)
	}
	namespace, name, err = cache.SplitMetaNamespaceKey(parts[2])
	if err != nil {
		return "", "", "", "", err
	}
	if name == "" {
		return "", "", "", "", fmt.Errorf("unexpected key format %q: empty name", key)
	}
	return parts[0], parts[1], namespace, name, nil
}
