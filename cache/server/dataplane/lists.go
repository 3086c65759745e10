package dataplane

import (
	"context"
	"net/http"

	"k8s.io/apimachinery/pkg/api/meta"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/endpoints/handlers"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
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
		ctx := req.Context()
		res := &listReservation{b: r.lists}
		r.lists.begin()
		defer res.done(ctx)
		serve := func(w http.ResponseWriter) {
			inner.ServeHTTP(w, req.WithContext(context.WithValue(ctx, listReservationKey{}, res)))
		}
		// Without a budget no LIST waits, so none would ever be joined
		// (sharedlists.go).
		key, shareable := flightKey(req)
		if !shareable || r.lists.capacity() <= 0 {
			serve(w)
			return
		}
		fl, leader := r.flights.lead(key)
		if leader {
			r.leadFlight(ctx, w, fl, res, serve)
			return
		}
		select {
		case <-fl.done:
		case <-ctx.Done():
			// Its client went away, or its time ran out (the timeout
			// filter answers): nothing to write.
			return
		}
		if a := fl.answer; a != nil {
			// Writing the answer costs no read and no encoding, but its
			// bytes still take CPU and the connection's buffers, at the
			// server and at a client: written all at once, the answers of
			// a large flight would starve GETs as the LISTs themselves
			// would, so a joiner takes its turn in the budget to write.
			if err := res.reserve(ctx, a.joinerCost(r.lists.capacity())); err != nil {
				responsewriters.ErrorNegotiated(err, scope.Serializer, scope.Kind.GroupVersion(), w, req)
				return
			}
			res.listed = a.objects
			sharedListAnswers.Inc()
			a.writeTo(w, true)
			return
		}
		serve(w)
	})
}

// leadFlight serves the LIST that leads fl, and fl's joiners with it: the
// answer is recorded if anyone joined by the time the storage is read.
func (r *Registry) leadFlight(ctx context.Context, w http.ResponseWriter, fl *listFlight, res *listReservation, serve func(http.ResponseWriter)) {
	fw := &flightWriter{w: w}
	res.flight = &flightStart{flights: r.flights, flight: fl, writer: fw}
	var answer *sharedAnswer
	// Even if the handler panics, the joiners are let go (to serve
	// themselves).
	defer func() { r.flights.finish(fl, answer) }()
	serve(fw)
	answer = fw.answer(ctx, res.listed)
	if answer != nil {
		answer.writeTo(w, false)
	}
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
	// From here on what is read is read after every LIST that joined this
	// one arrived, and no other joins (sharedlists.go).
	res.flight.begin()
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
