// Package standin makes a cache server stand in for a kcp shard, for the
// examples and the tests: a server that holds one shard's own objects and
// serves them under /clusters/{cluster}/, as a shard does, and that may
// serve a cache mounted under /services/cache/, as a shard started with
// --run-cache-server does. A production cache server has no such paths.
package standin

import (
	"net/http"
	"strings"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/server"
)

// Serve makes host a stand-in for shard: /clusters/{cluster}/... addresses
// cluster {cluster} of shard's partition ("*": every cluster), and mount,
// when not nil, serves the cache mounted in host under /services/cache/.
// Both come before host's whole handler chain, as a shard's own routing
// comes before its filters. Call it after New, before Run.
func Serve(host *server.Server, shard string, mount *server.Mount) {
	h := host.GenericAPIServer.Handler
	h.FullHandlerChain = Handler(h.FullHandlerChain, shard, mount)
}

// Handler routes as Serve describes, in front of chain.
func Handler(chain http.Handler, shard string, mount *server.Mount) http.Handler {
	clusters := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		// The cache's own grammar names the partition from here on.
		if rest, ok := strings.CutPrefix(req.URL.Path, "/"+kcpcache.ClustersSegment+"/"); ok {
			cluster, apiPath, _ := strings.Cut(rest, "/")
			req = kcpcache.WithPath(req, kcpcache.ScopedPath(kcpcache.Scope{Shard: shard, Cluster: cluster}, "/"+apiPath))
		}
		chain.ServeHTTP(w, req)
	})
	if mount == nil {
		return clusters
	}
	return mount.Route(clusters)
}
