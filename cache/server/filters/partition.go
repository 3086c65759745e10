package filters

import (
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kcp-cache/kcp-cache/cache"
)

// WithPartition resolves the partition scope of every request. Paths under
// /services/cache must name a valid shard and cluster (or "*"); the prefix is
// stripped so that upstream handlers see an ordinary API path. Other paths
// (health, metrics, CRD management, the loopback client) are served in the
// reserved system scope.
func WithPartition(handler http.Handler, codecs runtime.NegotiatedSerializer) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		parsed, err := cache.ParsePath(req.URL.Path)
		if err != nil {
			writeStatus(w, req, codecs, apierrors.NewBadRequest(err.Error()))
			return
		}
		scope := cache.SystemScope
		if parsed.Scoped {
			scope = parsed.Scope
			req = withPath(req, parsed.APIPath)
		}
		handler.ServeHTTP(w, req.WithContext(cache.WithScope(req.Context(), scope)))
	})
}

// withPath returns a shallow copy of req that addresses path instead.
func withPath(req *http.Request, path string) *http.Request {
	r := new(http.Request)
	*r = *req
	u := *req.URL
	r.URL = &u
	r.URL.Path = path
	r.URL.RawPath = ""
	r.RequestURI = r.URL.RequestURI()
	return r
}
