package dataplane

import (
	"context"
	"net/http"

	"k8s.io/apimachinery/pkg/api/meta"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/endpoints/handlers"
	"k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
)

// listHandler serves a LIST of store within the list budget: the
// reservation lives from before the storage is read until the response is
// written, because encoding the response is what costs CPU and memory.
func (r *Registry) listHandler(store *registry.Store, scope *handlers.RequestScope) http.Handler {
	lister := budgetedLister{Lister: store, store: store, counts: r.counts}
	inner := handlers.ListResource(lister, store, scope, false, r.cfg.MinRequestTimeout)
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		res := &listReservation{b: r.lists}
		r.lists.begin()
		defer res.done(req.Context())
		inner.ServeHTTP(w, req.WithContext(context.WithValue(req.Context(), listReservationKey{}, res)))
	})
}

// budgetedLister reserves a LIST's share of the budget before reading the
// storage, so that a LIST waiting for its turn holds no objects, then
// settles the reservation on the number of objects it got.
type budgetedLister struct {
	rest.Lister
	store  *registry.Store
	counts *objectCounts
}

func (l budgetedLister) List(ctx context.Context, opts *metainternalversion.ListOptions) (runtime.Object, error) {
	res := reservationFrom(ctx)
	if res == nil {
		return l.Lister.List(ctx, opts)
	}
	if res.b.capacity() > 0 {
		if err := res.reserve(ctx, l.estimate(opts)); err != nil {
			return nil, err
		}
	}
	obj, err := l.Lister.List(ctx, opts)
	if err != nil {
		return nil, err
	}
	res.settle(meta.LenList(obj))
	return obj, nil
}

// estimate is an upper bound of the LIST's size: the type's object count
// in every partition as last counted (objectCounts), or the limit. While no
// count is known, the LIST reserves the whole budget: the reservation
// shrinks to the real size as soon as the objects are read.
func (l budgetedLister) estimate(opts *metainternalversion.ListOptions) int {
	n, ok := l.counts.get(l.store)
	if !ok {
		n = int(^uint(0) >> 1)
	}
	if opts != nil && opts.Limit > 0 && opts.Limit < int64(n) {
		n = int(opts.Limit)
	}
	return n
}
