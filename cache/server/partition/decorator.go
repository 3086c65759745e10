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

// NewStorageDecorator returns the decorator that builds the partitioned
// storage stack of one resource. It mirrors registry.StorageWithCacher (raw
// etcd3 storage, cacher, cache delegator) with four differences: the
// cacher's key function derives the partition from the object, the
// attribute function adds the partition fields, and the raw storage the
// cacher fills itself from declares watch-list unsupported and releases the
// history of mass deletions (see HistoryTrim). Outermost, the errors of an
// etcd that cannot serve now are answered 503 with Retry-After instead of
// upstream's 500 (etcdAnswers).
//
// The upstream cacheKeyFunc is ignored: it is computed from a context that
// holds only the namespace, so it cannot know the partition.
func NewStorageDecorator(trim HistoryTrim, majority Majority) generic.StorageDecorator {
	return asStorageDecorator(func(
		config *storagebackend.ConfigForResource,
		registryPrefix, resourcePrefix string,
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
		source := newCacherSource(raw, config.GroupResource.String(), trim, majority)

		cacher, err := cacherstorage.NewCacherFromConfig(cacherstorage.Config{
			Storage:             source,
			Versioner:           storage.APIObjectVersioner{},
			GroupResource:       config.GroupResource,
			EventsHistoryWindow: config.EventsHistoryWindow,
			ResourcePrefix:      resourcePrefix,
			KeyFunc:             cacherKeyFunc(resourcePrefix),
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
		stop := make(chan struct{})
		go source.run(config.GroupResource.String(), stop)
		delegator := cacherstorage.NewCacheDelegator(cacher, source)
		var once sync.Once
		destroy := func() {
			once.Do(func() {
				close(stop)
				delegator.Stop()
				cacher.Stop()
				destroyRaw()
			})
		}
		return withEtcdAnswers(&scopedStorage{
			delegate:       delegator,
			resourcePrefix: resourcePrefix,
			registryPrefix: registryPrefix,
			groupResource:  config.GroupResource,
		}, config.GroupResource), destroy, nil
	})
}

// buildStorage is a StorageDecorator without the registry's key function,
// whose type differs between upstream and kcp's fork (keyfuncs_*.go), and
// with the registry's resource prefix (the prefix of the keys it hands
// over) next to the one storage keeps objects under; they differ only for
// kcp's fork's custom resources (upstreamResourcePrefix).
type buildStorage func(
	config *storagebackend.ConfigForResource,
	registryPrefix, resourcePrefix string,
	newFunc func() runtime.Object,
	newListFunc func() runtime.Object,
	getAttrsFunc storage.AttrFunc,
	triggerFuncs storage.IndexerFuncs,
	indexers *cache.Indexers,
) (storage.Interface, factory.DestroyFunc, error)
