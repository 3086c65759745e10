package dataplane

import (
	"context"
	"net/http"
	"sync"
	"time"

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
		if err := res.reserve(ctx, l.estimate(ctx, opts)); err != nil {
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
// in every partition, or the limit. When the storage cannot count, the LIST
// reserves the whole budget: the reservation shrinks to the real size as
// soon as the objects are read.
func (l budgetedLister) estimate(ctx context.Context, opts *metainternalversion.ListOptions) int {
	n, ok := l.counts.get(ctx, l.store)
	if !ok {
		n = int(^uint(0) >> 1)
	}
	if opts != nil && opts.Limit > 0 && opts.Limit < int64(n) {
		n = int(opts.Limit)
	}
	return n
}

// objectCountTTL is how long a type's object count is reused: counting
// reads every key of the type, too much to do for every LIST of a storm.
const objectCountTTL = time.Second

// maxCountedStores bounds the cache of counts; a server serves tens of
// types, more only while types come and go.
const maxCountedStores = 1024

// objectCounts caches each store's object count for a moment.
type objectCounts struct {
	mu     sync.Mutex
	counts map[*registry.Store]objectCount
}

type objectCount struct {
	n  int
	at time.Time
}

func newObjectCounts() *objectCounts {
	return &objectCounts{counts: map[*registry.Store]objectCount{}}
}

// get returns store's object count; false when the storage cannot tell.
func (c *objectCounts) get(ctx context.Context, store *registry.Store) (int, bool) {
	c.mu.Lock()
	cached, ok := c.counts[store]
	c.mu.Unlock()
	if ok && time.Since(cached.at) < objectCountTTL {
		return cached.n, true
	}
	stats, err := store.Storage.Stats(ctx)
	if err != nil {
		return 0, false
	}
	n := int(stats.ObjectCount)
	c.mu.Lock()
	if len(c.counts) >= maxCountedStores {
		// Stores of types no longer served stay in the map until here.
		clear(c.counts)
	}
	c.counts[store] = objectCount{n: n, at: time.Now()}
	c.mu.Unlock()
	return n, true
}
