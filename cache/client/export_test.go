package client

import (
	"context"
	"net/http"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// Seams for this package's tests. They are external (package client_test),
// so that they may use the server's fixture, which imports this package;
// these expose the unexported pieces they drive with fakes. None is part of
// the package's API: the file is compiled only into the tests.

var (
	// NewInformerWithClock is an Informer over any ListerWatcher, with a
	// clock the test controls.
	NewInformerWithClock = newInformer
	NewFreshness         = newFreshness
	NewEpochs            = newEpochs
	ErrNoCache           = errNoCache
	ParseRequestPath     = parseRequestPath
)

// ObservedListerWatcher is the ListerWatcher an Informer lists and watches
// through.
type ObservedListerWatcher = observedListerWatcher

// NewObservedListerWatcher wraps lw as an Informer does; epochs may be nil.
func NewObservedListerWatcher(lw cache.ListerWatcher, f *freshness, epochs *Epochs) *ObservedListerWatcher {
	o := newObservedListerWatcher(lw, f)
	o.epochs = epochs
	return o
}

// LastListEpoch is the epoch of the last complete list.
func (lw *observedListerWatcher) LastListEpoch() (string, bool) { return lw.lastListEpoch() }

// ListerWatcher is what the informer lists and watches through.
func (i *Informer) ListerWatcher() cache.ListerWatcher { return i.lw }

// Get is the last time the data was known fresh, and whether a watch is open.
func (f *freshness) Get() (time.Time, bool) { return f.get() }

// Observe records epoch as a response of the cache would.
func (e *Epochs) Observe(epoch string) { e.observe(epoch) }

// AnnounceEpoch tells the request whose context is ctx which epoch answered
// it, as the epoch round tripper does.
func AnnounceEpoch(ctx context.Context, epoch string) {
	if h, ok := ctx.Value(epochHolderKey{}).(*epochHolder); ok {
		h.set(epoch)
	}
}

// WithEpochHolder returns a request context that receives the epoch of its
// response, and the function that reads it.
func WithEpochHolder(ctx context.Context) (context.Context, func() (string, bool)) {
	ctx, h := withEpochHolder(ctx)
	return ctx, h.get
}

// NewEpochRoundTripper records the epochs of delegate's responses in epochs.
func NewEpochRoundTripper(delegate http.RoundTripper, epochs *Epochs) http.RoundTripper {
	return epochRoundTripper{delegate: delegate, epochs: epochs}
}

// RESTConfig is the configuration the client's requests go out with.
func (c *ClusterClient) RESTConfig() *rest.Config { return c.config }

// ResourceOfAPIPath is the resource part of a home revision's key.
var ResourceOfAPIPath = resourceOfAPIPath
