package partition

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/registry/generic"
)

// RESTOptionsGetter wraps an upstream getter so that every registry it
// serves (the CRD registry through GenericConfig.RESTOptionsGetter, every
// custom resource through apiextensions' CRDRESTOptionsGetter) stores through
// NewStorageDecorator, with the watch cache on regardless of the delegate.
type RESTOptionsGetter struct {
	Delegate generic.RESTOptionsGetter
	// HistoryTrim says when a watch cache releases the history of mass
	// deletions; the zero value means the defaults.
	HistoryTrim HistoryTrim
	// Majority, for a member of an in-memory group, tells whether it is cut
	// off from its majority (majority.go); nil otherwise.
	Majority Majority
}

// GetRESTOptions implements generic.RESTOptionsGetter.
func (g RESTOptionsGetter) GetRESTOptions(resource schema.GroupResource, example runtime.Object) (generic.RESTOptions, error) {
	opts, err := g.Delegate.GetRESTOptions(resource, example)
	if err != nil {
		return opts, err
	}
	opts.Decorator = NewStorageDecorator(g.HistoryTrim, g.Majority)
	// A copy: the delegate's configuration is not ours to change.
	storageConfig := *opts.StorageConfig
	storageConfig.Codec = answerCodec(resource, storageConfig.Codec)
	opts.StorageConfig = &storageConfig
	// No garbage collector runs against the cache; orphan and foreground
	// finalizers would never be removed.
	opts.EnableGarbageCollection = false
	return opts, nil
}
