package filters

import (
	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

// CachePaths maps a request path to the partition it addresses and the API
// path the upstream handlers should see, in the grammar of a cache server, standalone or mounted under
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
