package replication

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

// Key names one replicated object: its resource, its logical cluster and its
// namespace and name. The shard is implied: a controller serves one.
type Key struct {
	GVR       schema.GroupVersionResource
	Cluster   string
	Namespace string
	Name      string
}

// String renders the key the way kcp's replication controller does,
// "<version>.<resource>.<group>::<cluster>|[<namespace>/]<name>", so log
// lines from both can be compared.
func (k Key) String() string {
	return fmt.Sprintf("%s.%s.%s::%s|%s", k.GVR.Version, k.GVR.Resource, k.GVR.Group, k.Cluster, k.objectName())
}

// objectName is "[namespace/]name", the form the index lookups take.
func (k Key) objectName() string {
	return cache.ObjectName{Namespace: k.Namespace, Name: k.Name}.String()
}

// keyFor returns the key of obj, an object or a tombstone from an informer
// of gvr. The cluster comes from the kcp.io/cluster annotation, which local
// and cached objects both carry; an object without it has no key.
func keyFor(gvr schema.GroupVersionResource, obj interface{}) (Key, error) {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return Key{}, fmt.Errorf("object of %s has no metadata: %w", gvr, err)
	}
	cluster := m.GetAnnotations()[kcpcache.AnnotationCluster]
	if cluster == "" {
		return Key{}, fmt.Errorf("%s %q has no %s annotation", gvr, cache.ObjectName{Namespace: m.GetNamespace(), Name: m.GetName()}, kcpcache.AnnotationCluster)
	}
	return Key{GVR: gvr, Cluster: cluster, Namespace: m.GetNamespace(), Name: m.GetName()}, nil
}

// resourceArg renders gvr as "resource.version.group", the form of the
// --replication-extra-resources flag, for logs.
func resourceArg(gvr schema.GroupVersionResource) string {
	return gvr.Resource + "." + gvr.Version + "." + gvr.Group
}
