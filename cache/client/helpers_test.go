package client_test

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

// obj builds an apiexport-like copy as the server returns it. path may be ""
// for an object without the kcp.io/path annotation.
func obj(shard, cluster, namespace, name, path string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("apis.kcp.io/v1alpha1")
	u.SetKind("APIExport")
	u.SetNamespace(namespace)
	u.SetName(name)
	annotations := map[string]string{}
	if shard != "" {
		annotations[kcpcache.AnnotationShard] = shard
	}
	if cluster != "" {
		annotations[kcpcache.AnnotationCluster] = cluster
	}
	if path != "" {
		annotations[kcpcache.AnnotationPath] = path
	}
	u.SetAnnotations(annotations)
	return u
}

// withRV returns a copy of o at resource version rv.
func withRV(o *unstructured.Unstructured, rv string) *unstructured.Unstructured {
	c := o.DeepCopy()
	c.SetResourceVersion(rv)
	return c
}
