package partition

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

// partitionPrefix is the key prefix of one partition (or of every partition of
// a shard when cluster is empty, or of the whole resource when both are).
// It always ends with "/" so that shard "a" never matches shard "ab".
func partitionPrefix(resourcePrefix, shard, cluster string) string {
	var b strings.Builder
	b.WriteString(resourcePrefix)
	b.WriteByte('/')
	if shard != "" {
		b.WriteString(shard)
		b.WriteByte('/')
		if cluster != "" {
			b.WriteString(cluster)
			b.WriteByte('/')
		}
	}
	return b.String()
}

// scopedKey inserts the partition of a concrete scope after the resource
// prefix of a key the registry built ("<prefix>", "<prefix>/<ns>",
// "<prefix>/<name>" or "<prefix>/<ns>/<name>").
func scopedKey(resourcePrefix string, s kcpcache.Scope, key string) (string, error) {
	rest, ok := kcpcache.CutPathPrefix(key, resourcePrefix)
	if !ok {
		return "", fmt.Errorf("key %q is outside resource prefix %q", key, resourcePrefix)
	}
	return strings.TrimSuffix(partitionPrefix(resourcePrefix, s.Shard, s.Cluster), "/") + rest, nil
}

// objectKey is the key of a stored object, derived only from the object
// itself. The watch cache uses it: upstream computes cache keys without the
// request context (newStoreKeyFuncs in registry/generic/registry/store.go),
// so shard and cluster must come from the persisted annotations.
func objectKey(resourcePrefix string, obj runtime.Object) (string, error) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return "", err
	}
	s, err := scopeOfObject(obj, m)
	if err != nil {
		return "", err
	}
	key := strings.TrimSuffix(partitionPrefix(resourcePrefix, s.Shard, s.Cluster), "/")
	if ns := m.GetNamespace(); ns != "" {
		key += "/" + ns
	}
	return key + "/" + m.GetName(), nil
}

// scopeOfObject reads the partition annotations that storage persisted.
func scopeOfObject(obj runtime.Object, m metav1Object) (kcpcache.Scope, error) {
	shard, cluster := partitionAnnotations(obj, m)
	s := kcpcache.Scope{Shard: shard, Cluster: cluster}
	if s.Shard == "" || s.Cluster == "" {
		return kcpcache.Scope{}, fmt.Errorf("object %s/%s lacks the %s and %s annotations", m.GetNamespace(), m.GetName(), kcpcache.AnnotationShard, kcpcache.AnnotationCluster)
	}
	return s, nil
}

// partitionReader is implemented by objects that read their partition
// annotations without materializing every annotation (opaque.Object); the
// watch cache asks for them several times per event.
type partitionReader interface {
	PartitionAnnotations() (shard, cluster string)
}

func partitionAnnotations(obj runtime.Object, m metav1Object) (shard, cluster string) {
	if p, ok := obj.(partitionReader); ok {
		return p.PartitionAnnotations()
	}
	a := m.GetAnnotations()
	return a[kcpcache.AnnotationShard], a[kcpcache.AnnotationCluster]
}

type metav1Object interface {
	GetNamespace() string
	GetName() string
	GetAnnotations() map[string]string
}
