package filters

import (
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/server/partition"
)

// WithPartition resolves the partition scope of every request (CachePaths).
// A scoped path must name a valid shard and cluster (or "*"); its prefix is
// stripped so that upstream handlers see an ordinary API path. Other paths
// (health, metrics, CRD management, the loopback client) are served in the
// reserved system scope. In the kcp build it also gives the scope to kcp's
// Kubernetes fork (partition.RequestContext).
func WithPartition(handler http.Handler, codecs runtime.NegotiatedSerializer) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		parsed, err := CachePaths(req.URL.Path)
		if err != nil {
			writeStatus(w, req, codecs, apierrors.NewBadRequest(err.Error()))
			return
		}
		scope := kcpcache.SystemScope
		if parsed.Scoped {
			scope = parsed.Scope
		}
		if parsed.APIPath != req.URL.Path {
			req = kcpcache.WithPath(req, parsed.APIPath)
		}
		ctx := partition.RequestContext(kcpcache.WithScope(req.Context(), scope), scope)
		handler.ServeHTTP(w, req.WithContext(ctx))
	})
}
