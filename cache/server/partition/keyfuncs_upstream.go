//go:build !kcp

package partition

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/apiserver/pkg/storage/storagebackend/factory"
	"k8s.io/client-go/tools/cache"
)

// The upstream build's key function types: upstream's StorageDecorator and
// cacher.Config.KeyFunc take func(runtime.Object) (string, error);
// keyfuncs_kcp.go has the fork's, which also take a context.

// asStorageDecorator is build as an upstream generic.StorageDecorator. The
// registry's key function is dropped: scopedStorage and objectKey own the
// key layout.
func asStorageDecorator(build buildStorage) generic.StorageDecorator {
	return func(config *storagebackend.ConfigForResource, resourcePrefix string, _ func(runtime.Object) (string, error), newFunc func() runtime.Object, newListFunc func() runtime.Object, getAttrsFunc storage.AttrFunc, triggerFuncs storage.IndexerFuncs, indexers *cache.Indexers) (storage.Interface, factory.DestroyFunc, error) {
		return build(config, resourcePrefix, resourcePrefix, newFunc, newListFunc, getAttrsFunc, triggerFuncs, indexers)
	}
}

// cacherKeyFunc is the watch cache's key function: objectKey.
func cacherKeyFunc(resourcePrefix string) func(runtime.Object) (string, error) {
	return func(obj runtime.Object) (string, error) { return objectKey(resourcePrefix, obj) }
}
