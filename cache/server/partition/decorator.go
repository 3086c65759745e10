package partition

import (
	"sync"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/storage"
	cacherstorage "k8s.io/apiserver/pkg/storage/cacher"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/apiserver/pkg/storage/storagebackend/factory"
	"k8s.io/client-go/tools/cache"
)

// StorageDecorator builds the partitioned storage stack for one resource. It
// mirrors registry.StorageWithCacher (raw etcd3 storage, cacher, cache
// delegator) with three differences: the cacher's key function derives the
// partition from the object, the attribute function adds the partition
// fields, and the raw storage declares watch-list unsupported.
//
// The upstream cacheKeyFunc is ignored: it is computed from a context that
// holds only the namespace, so it cannot know the partition.
func StorageDecorator(
	config *storagebackend.ConfigForResource,
	resourcePrefix string,
	_ func(obj runtime.Object) (string, error),
	newFunc func() runtime.Object,
	newListFunc func() runtime.Object,
	getAttrsFunc storage.AttrFunc,
	triggerFuncs storage.IndexerFuncs,
	indexers *cache.Indexers,
) (storage.Interface, factory.DestroyFunc, error) {
	raw, destroyRaw, err := generic.NewRawStorage(config, newFunc, newListFunc, resourcePrefix)
	if err != nil {
		return nil, nil, err
	}
	raw = watchListUnsupported{raw}

	cacher, err := cacherstorage.NewCacherFromConfig(cacherstorage.Config{
		Storage:             raw,
		Versioner:           storage.APIObjectVersioner{},
		GroupResource:       config.GroupResource,
		EventsHistoryWindow: config.EventsHistoryWindow,
		ResourcePrefix:      resourcePrefix,
		KeyFunc:             func(obj runtime.Object) (string, error) { return objectKey(resourcePrefix, obj) },
		NewFunc:             newFunc,
		NewListFunc:         newListFunc,
		GetAttrsFunc:        withPartitionFields(getAttrsFunc),
		IndexerFuncs:        triggerFuncs,
		Indexers:            withClusterIndex(indexers),
		Codec:               config.Codec,
	})
	if err != nil {
		destroyRaw()
		return nil, nil, err
	}
	delegator := cacherstorage.NewCacheDelegator(cacher, raw)
	var once sync.Once
	destroy := func() {
		once.Do(func() {
			delegator.Stop()
			cacher.Stop()
			destroyRaw()
		})
	}
	return &scopedStorage{
		delegate:       delegator,
		resourcePrefix: resourcePrefix,
		groupResource:  config.GroupResource,
	}, destroy, nil
}

// watchListUnsupported makes the cacher's reflector fill the watch cache with
// LIST+WATCH instead of a streaming watch-list. client-go's watch-list
// buffers initial events in a store keyed by namespace/name
// (tools/cache/reflector.go), which would keep one of several same-named
// objects from different partitions. The cacher asks through
// watchlist.DoesClientNotSupportWatchListSemantics.
type watchListUnsupported struct {
	storage.Interface
}

func (watchListUnsupported) IsWatchListSemanticsUnSupported() bool { return true }
