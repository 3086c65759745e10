package client

import (
	"context"
	"net/http"
	"sync"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

// Epochs records the cache epoch that responses announce (the
// kcpcache.EpochHeader). Every response through a ClusterClient updates it,
// so whatever the client does (a heartbeat, a list, a watch) keeps it
// current. A server that sends no header leaves it at "".
type Epochs struct {
	mu      sync.Mutex
	current string
	seen    bool
	// changed is closed and replaced on every change.
	changed chan struct{}
}

func newEpochs() *Epochs { return &Epochs{changed: make(chan struct{})} }

// Current returns the epoch of the latest response and whether any response
// has been seen.
func (e *Epochs) Current() (string, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.current, e.seen
}

// Changed returns a channel that is closed at the next change of the epoch.
func (e *Epochs) Changed() <-chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.changed
}

// observe records the epoch of one response.
func (e *Epochs) observe(epoch string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.seen && e.current == epoch {
		return
	}
	first := !e.seen
	e.current, e.seen = epoch, true
	if !first || epoch != "" {
		close(e.changed)
		e.changed = make(chan struct{})
	}
}

// epochRoundTripper feeds every response's epoch to Epochs and to the
// request's own epochHolder, if its context carries one: an informer needs
// the epoch of its own list, not of whatever response came last.
type epochRoundTripper struct {
	delegate http.RoundTripper
	epochs   *Epochs
}

// RoundTrip implements http.RoundTripper.
func (rt epochRoundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := rt.delegate.RoundTrip(req)
	if err != nil || resp == nil {
		return resp, err
	}
	// A response that reached the cache's handler chain carries the header;
	// one from something in front of it (a proxy's 502) says nothing.
	epoch, ok := resp.Header[http.CanonicalHeaderKey(kcpcache.EpochHeader)]
	if !ok && resp.StatusCode >= 500 {
		return resp, nil
	}
	value := ""
	if len(epoch) > 0 {
		value = epoch[0]
	}
	rt.epochs.observe(value)
	if h, ok := req.Context().Value(epochHolderKey{}).(*epochHolder); ok {
		h.set(value)
	}
	return resp, nil
}

// WrappedRoundTripper lets client-go's transport debugging see through.
func (rt epochRoundTripper) WrappedRoundTripper() http.RoundTripper { return rt.delegate }

// epochHolder receives the epoch of the one request whose context carries it.
type epochHolder struct {
	mu    sync.Mutex
	epoch string
	known bool
}

type epochHolderKey struct{}

func withEpochHolder(ctx context.Context) (context.Context, *epochHolder) {
	h := &epochHolder{}
	return context.WithValue(ctx, epochHolderKey{}, h), h
}

func (h *epochHolder) set(epoch string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.epoch, h.known = epoch, true
}

// get returns the request's epoch and whether a response carried one.
func (h *epochHolder) get() (string, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.epoch, h.known
}
