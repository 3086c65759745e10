package filters

import (
	"fmt"
	"strings"

	"github.com/kcp-cache/kcp-cache/cache"
)

// PathScoper maps a request path to the partition it addresses and the API
// path the upstream handlers should see. An unscoped result is served in the
// system partition.
type PathScoper func(path string) (cache.ParsedPath, error)

// CachePaths is the grammar of a standalone cache server:
// /services/cache/shards/{shard}/clusters/{cluster}/..., anything else is
// unscoped.
func CachePaths(path string) (cache.ParsedPath, error) { return cache.ParsePath(path) }

// MountedCachePaths is the grammar of a cache mounted under /services/cache/
// of a host server, which routes only that prefix to it: scoped paths as in
// CachePaths, and /services/cache/<anything else> addresses the system
// partition (the mounted server's own loopback client uses that).
func MountedCachePaths(path string) (cache.ParsedPath, error) {
	rest, ok := strings.CutPrefix(path, cache.ServicePrefix)
	if !ok || (rest != "" && !strings.HasPrefix(rest, "/")) {
		return cache.ParsedPath{}, fmt.Errorf("path %q is outside %s", path, cache.ServicePrefix)
	}
	if rest == "/shards" || strings.HasPrefix(rest, "/shards/") {
		return cache.ParsePath(path)
	}
	if rest == "" {
		rest = "/"
	}
	return cache.ParsedPath{APIPath: rest}, nil
}

// ClusterPaths is a kcp-shard-like grammar for a server that holds one
// shard's own objects: /clusters/{cluster}/... addresses cluster {cluster}
// of shard, "*" every cluster; anything else is unscoped.
func ClusterPaths(shard string) PathScoper {
	return func(path string) (cache.ParsedPath, error) {
		rest, ok := strings.CutPrefix(path, "/clusters/")
		if !ok {
			return cache.ParsedPath{APIPath: path}, nil
		}
		cluster, apiPath, _ := strings.Cut(rest, "/")
		s := cache.Scope{Shard: shard, Cluster: cluster}
		if err := s.Validate(); err != nil {
			return cache.ParsedPath{}, err
		}
		return cache.ParsedPath{Scope: s, APIPath: "/" + apiPath, Scoped: true}, nil
	}
}
