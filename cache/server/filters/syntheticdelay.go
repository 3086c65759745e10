package filters

import (
	"net/http"
	"time"
)

// WithSyntheticDelay holds every request back for delay before handing it
// on, as kcp's cache-server does with --synthetic-delay: kcp's tests make
// the cache slow to expose clients that assume it answers at once. It goes
// outermost, so that every request, health checks included, waits, as in
// kcp. A client that gives up meanwhile is not served. A zero delay adds
// nothing to the chain.
func WithSyntheticDelay(handler http.Handler, delay time.Duration) http.Handler {
	if delay <= 0 {
		return handler
	}
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		t := time.NewTimer(delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-req.Context().Done():
			return
		}
		handler.ServeHTTP(w, req)
	})
}
