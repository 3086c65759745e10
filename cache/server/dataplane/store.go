package dataplane

import (
	"context"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/storage"

	"github.com/kcp-cache/kcp-cache/cache/server/opaque"
	"github.com/kcp-cache/kcp-cache/cache/server/partition"
)

// opaqueRESTOptions hands every store of the data plane the opaque storage
// codec and apiextensions' key layout (<group>/<resource>), so that data
// stored by earlier releases, which served these types as custom resources,
// stays where it is. The delegate provides etcd and the partitioned storage
// decorator.
type opaqueRESTOptions struct {
	delegate generic.RESTOptionsGetter
}

func (g opaqueRESTOptions) GetRESTOptions(gr schema.GroupResource, example runtime.Object) (generic.RESTOptions, error) {
	opts, err := g.delegate.GetRESTOptions(gr, example)
	if err != nil {
		return opts, err
	}
	cfg := *opts.StorageConfig
	cfg.Codec = opaque.Codec{}
	opts.StorageConfig = &cfg
	opts.ResourcePrefix = gr.Group + "/" + gr.Resource
	return opts, nil
}

// newStore builds the registry Store of r: upstream's generic Store (create,
// update, delete, list, watch, dry-run, preconditions, paging) with the
// opaque objects and our strategy, on the partitioned storage getter
// provides.
func newStore(r Resource, getter generic.RESTOptionsGetter, t typing) (*registry.Store, error) {
	return newStoreWith(r, opaqueRESTOptions{getter}, t)
}

// newStoreWith builds the registry Store of r on the storage options
// returns.
func newStoreWith(r Resource, options generic.RESTOptionsGetter, t typing) (*registry.Store, error) {
	gr := r.GroupResource()
	s := newStrategy(r, t)
	store := &registry.Store{
		NewFunc:                   func() runtime.Object { return &opaque.Object{} },
		NewListFunc:               func() runtime.Object { return &opaque.ObjectList{} },
		DefaultQualifiedResource:  gr,
		SingularQualifiedResource: schema.GroupResource{Group: r.Group, Resource: r.Singular},
		CreateStrategy:            s,
		UpdateStrategy:            s,
		DeleteStrategy:            s,
		TableConvertor:            rest.NewDefaultTableConvertor(gr),
	}
	store.BeginCreate = beginCreate
	attrs := storage.DefaultClusterScopedAttr
	if r.Namespaced {
		attrs = storage.DefaultNamespaceScopedAttr
	}
	if err := store.CompleteWithOptions(&generic.StoreOptions{RESTOptions: options, AttrFunc: attrs}); err != nil {
		return nil, err
	}
	return store, nil
}

// beginCreate runs before the registry prepares a created object. It refuses
// an object naming another partition (partition.CheckCreate) and gives an
// object without a uid and creation time the fresh ones upstream's registry
// gives every created object. Upstream's registry has set them by now; kcp's
// fork skips that for objects carrying kcp.io/shard (it keeps replicas'
// origin metadata, which storage restores in both builds) and would fail
// such an object that lacks them with a 500. partition.Admission fills them
// the same way for every create it sees (CRDs included); this covers a
// create that reaches the store without the admission chain.
func beginCreate(ctx context.Context, obj runtime.Object, _ *metav1.CreateOptions) (registry.FinishFunc, error) {
	if err := partition.CheckCreate(ctx, obj); err != nil {
		return nil, err
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, err
	}
	if !metav1.HasObjectMetaSystemFieldValues(m) {
		m.SetCreationTimestamp(metav1.Now())
		m.SetUID(uuid.NewUUID())
	}
	return func(context.Context, bool) {}, nil
}
