package filters

import (
	"strings"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

// PathScoper maps a request path to the partition it addresses and the API
// path the upstream handlers should see. An unscoped result is served in the
// system partition.
type PathScoper func(path string) (kcpcache.ParsedPath, error)

// CachePaths is the grammar of a cache server, standalone or mounted under
// /services/cache/ of a host: /services/cache/shards/{shard}/clusters/{cluster}/...
// is scoped; any other path below /services/cache (health checks, CRD
// management, a mounted server's own loopback client) and any path outside
// it address the system partition, with the prefix stripped. Like kcp's
// cache server, it accepts system paths with and without the prefix.
func CachePaths(path string) (kcpcache.ParsedPath, error) {
	rest, ok := kcpcache.CutPathPrefix(path, kcpcache.ServicePrefix)
	if !ok {
		return kcpcache.ParsedPath{APIPath: path}, nil
	}
	if _, scoped := kcpcache.CutPathPrefix(rest, "/"+kcpcache.ShardsSegment); scoped {
		return kcpcache.ParsePath(path)
	}
	if rest == "" {
		rest = "/"
	}
	return kcpcache.ParsedPath{APIPath: rest}, nil
}

// ClusterPaths is a kcp-shard-like grammar for a server that holds one
// shard's own objects: /clusters/{cluster}/... addresses cluster {cluster}
// of shard, "*" every cluster; anything else is unscoped.
func ClusterPaths(shard string) PathScoper {
	return func(path string) (kcpcache.ParsedPath, error) {
		rest, ok := strings.CutPrefix(path, "/"+kcpcache.ClustersSegment+"/")
		if !ok {
			return kcpcache.ParsedPath{APIPath: path}, nil
		}
		cluster, apiPath, _ := strings.Cut(rest, "/")
		s := kcpcache.Scope{Shard: shard, Cluster: cluster}
		if err := s.Validate(); err != nil {
			return kcpcache.ParsedPath{}, err
		}
		return kcpcache.ParsedPath{Scope: s, APIPath: "/" + apiPath, Scoped: true}, nil
	}
}
