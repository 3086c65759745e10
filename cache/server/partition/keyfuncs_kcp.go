//go:build kcp

package partition

import (
	"context"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/apiserver/pkg/storage/storagebackend/factory"
	"k8s.io/client-go/tools/cache"
)

// The kcp build's key function types: the fork's StorageDecorator and
// cacher.Config.KeyFunc take func(context.Context, runtime.Object) (string,
// error); keyfuncs_upstream.go has upstream's, without the context.

// asStorageDecorator is build as the fork's generic.StorageDecorator. The
// registry's key function is dropped: scopedStorage and objectKey own the
// key layout.
func asStorageDecorator(build buildStorage) generic.StorageDecorator {
	return func(config *storagebackend.ConfigForResource, resourcePrefix string, _ func(context.Context, runtime.Object) (string, error), newFunc func() runtime.Object, newListFunc func() runtime.Object, getAttrsFunc storage.AttrFunc, triggerFuncs storage.IndexerFuncs, indexers *cache.Indexers) (storage.Interface, factory.DestroyFunc, error) {
		return build(config, resourcePrefix, upstreamResourcePrefix(resourcePrefix), newFunc, newListFunc, getAttrsFunc, triggerFuncs, indexers)
	}
}

// upstreamResourcePrefix undoes the fork's "/customresources" segment.
// The fork's apiextensions appends it to the resource prefix of every custom
// resource storage ("/<group>/<resource>/customresources") after our
// RESTOptionsGetter; the cache keeps custom resources at upstream's
// "/<group>/<resource>" (the data plane's keys), and apiextensions' own
// storage (its CRD finalizer lists and deletes through it) must read the
// same keys, or the finalizer sees no objects and lets a CRD go while its
// objects stay.
func upstreamResourcePrefix(prefix string) string {
	if trimmed, ok := strings.CutSuffix(prefix, "/customresources"); ok && strings.Count(trimmed, "/") == 2 {
		return trimmed
	}
	return prefix
}

// cacherKeyFunc is the watch cache's key function: objectKey. Objects carry
// their partition, so the context adds nothing.
func cacherKeyFunc(resourcePrefix string) func(context.Context, runtime.Object) (string, error) {
	return func(_ context.Context, obj runtime.Object) (string, error) { return objectKey(resourcePrefix, obj) }
}
