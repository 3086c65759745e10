package filters

import (
	"net/http"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

// WithCacheName announces the cache's name in a hierarchy
// (kcpcache.CacheNameHeader) on every response; a cache without a name
// sends none.
func WithCacheName(handler http.Handler, name string) http.Handler {
	if name == "" {
		return handler
	}
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		w.Header().Set(kcpcache.CacheNameHeader, name)
		handler.ServeHTTP(w, req)
	})
}
