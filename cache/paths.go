package cache

import (
	"fmt"
	"strings"
)

const (
	// ServicePrefix is where the cache is served: every partitioned request
	// starts with ServicePrefix + "/shards/{shard}/clusters/{cluster}".
	ServicePrefix = "/services/cache"

	shardsSegment   = "shards"
	clustersSegment = "clusters"
)

// ScopedPathPrefix returns the URL prefix for a scope, for example
// "/services/cache/shards/amber/clusters/root". Append an API path to it.
func ScopedPathPrefix(s Scope) string {
	return ServicePrefix + "/" + shardsSegment + "/" + s.Shard + "/" + clustersSegment + "/" + s.Cluster
}

// ScopedPath joins the scope's prefix with an API path such as
// "/apis/apis.kcp.io/v1alpha1/apiexports".
func ScopedPath(s Scope, apiPath string) string {
	if apiPath == "" || apiPath == "/" {
		return ScopedPathPrefix(s)
	}
	if !strings.HasPrefix(apiPath, "/") {
		apiPath = "/" + apiPath
	}
	return ScopedPathPrefix(s) + apiPath
}

// ParsedPath is the result of splitting a request path into its scope and the
// API path that the Kubernetes handlers understand.
type ParsedPath struct {
	// Scope is the partition named by the path; the zero value when Scoped is false.
	Scope Scope
	// APIPath is what remains after the scope prefix, always starting with "/".
	APIPath string
	// Scoped is true when the path carried the /services/cache/shards/.../clusters/... prefix.
	Scoped bool
}

// ParsePath splits path into scope and API path. A path outside
// ServicePrefix is returned unscoped and unchanged. A path inside it must name
// both a shard and a cluster, and both names must be valid (or "*"); anything
// else is an error, so that no malformed segment ever reaches storage.
func ParsePath(path string) (ParsedPath, error) {
	rest, ok := cutPathPrefix(path, ServicePrefix)
	if !ok {
		return ParsedPath{APIPath: path}, nil
	}
	// rest is "" or starts with "/".
	parts := strings.SplitN(strings.TrimPrefix(rest, "/"), "/", 5)
	if len(parts) < 4 || parts[0] != shardsSegment || parts[2] != clustersSegment {
		return ParsedPath{}, fmt.Errorf("path %q does not have the form %s/shards/{shard}/clusters/{cluster}/...", path, ServicePrefix)
	}
	scope := Scope{Shard: parts[1], Cluster: parts[3]}
	if err := scope.Validate(); err != nil {
		return ParsedPath{}, err
	}
	apiPath := "/"
	if len(parts) == 5 {
		apiPath = "/" + parts[4]
	}
	return ParsedPath{Scope: scope, APIPath: apiPath, Scoped: true}, nil
}

// cutPathPrefix is strings.CutPrefix that only matches on a segment boundary.
func cutPathPrefix(path, prefix string) (string, bool) {
	rest, ok := strings.CutPrefix(path, prefix)
	if !ok || (rest != "" && !strings.HasPrefix(rest, "/")) {
		return path, false
	}
	return rest, true
}
