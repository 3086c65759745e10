package replication

import (
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"

	"github.com/kcp-cache/kcp-cache/cache/client"
)

// LocalSource is a shard's own view of one resource, across every logical
// cluster of the shard. kcp plugs in its cluster-aware informers here; tests
// and simple embeddings use FactorySources.
type LocalSource struct {
	// Informer delivers the resource's events in every logical cluster of the
	// shard. Its objects must carry the kcp.io/cluster annotation, which is
	// how they are keyed. The caller runs it; the controller only adds (and on
	// exit removes) a handler and waits for it to sync.
	Informer cache.SharedIndexInformer

	// Get returns the object named namespace/name (namespace "" for a
	// cluster-scoped resource) in logical cluster cluster, an error for which
	// apierrors.IsNotFound holds when there is none, or any other error, which
	// makes the controller retry later. It may return a typed object; the
	// controller converts it and never modifies what Get returns.
	Get func(cluster, namespace, name string) (runtime.Object, error)
}

// SourceProvider returns the LocalSource of a resource. The controller asks
// once per configured resource, from NewController.
type SourceProvider func(gvr schema.GroupVersionResource) (LocalSource, error)

// FactorySources returns a SourceProvider backed by a cache/client
// InformerFactory, for a shard whose objects live on a kcp-cache-style server
// (as in tests) or for any embedding that has one. The factory should be
// scoped to the shard (Scope{Shard: shard, Cluster: "*"}): with a wildcard
// shard, a name found in two shards is reported as an error. Start the
// factory after NewController, which creates the informers.
func FactorySources(f *client.InformerFactory) SourceProvider {
	return func(gvr schema.GroupVersionResource) (LocalSource, error) {
		if f == nil {
			return LocalSource{}, fmt.Errorf("no informer factory for %s", gvr)
		}
		inf := f.ForResource(gvr)
		return LocalSource{
			Informer: inf,
			Get: func(cluster, namespace, name string) (runtime.Object, error) {
				objectName := cache.ObjectName{Namespace: namespace, Name: name}.String()
				obj, err := client.GetByClusterAndName(inf.GetIndexer(), cluster, objectName)
				if apierrors.IsNotFound(err) {
					// client's NotFound names no resource; name ours in logs.
					return nil, apierrors.NewNotFound(gvr.GroupResource(), objectName)
				}
				return obj, err
			},
		}, nil
	}
}

// toUnstructured returns obj as unstructured, with apiVersion and kind filled
// in when a typed object lacks them (informers usually strip TypeMeta). An
// unstructured obj is returned as is, to spare a copy per reconcile: the
// result is read-only.
func toUnstructured(obj runtime.Object, gvr schema.GroupVersionResource, kind string) (*unstructured.Unstructured, error) {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		return u, nil
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, fmt.Errorf("converting %T to unstructured: %w", obj, err)
	}
	u := &unstructured.Unstructured{Object: m}
	if u.GetAPIVersion() == "" {
		u.SetAPIVersion(gvr.GroupVersion().String())
	}
	if u.GetKind() == "" {
		if kind == "" {
			return nil, fmt.Errorf("%T of %s has no kind, and the resource is configured without one", obj, gvr)
		}
		u.SetKind(kind)
	}
	return u, nil
}
