package filters

import (
	"net/http"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

// WithEpoch announces the cache's epoch (kcpcache.EpochHeader) on every
// response, errors included, so that every client request, whatever it
// asked, tells the client whether the cache's history it has seen still
// holds. It goes outermost: a refusal by any later filter carries it too.
func WithEpoch(handler http.Handler, epoch func() string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		w.Header().Set(kcpcache.EpochHeader, epoch())
		handler.ServeHTTP(w, req)
	})
}
