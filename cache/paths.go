package cache

import (
	"fmt"
	"net/http"
	"strings"
)

const (
	// ServicePrefix is where the cache is served: every partitioned request
	// starts with ServicePrefix + "/shards/{shard}/clusters/{cluster}".
	ServicePrefix = "/services/cache"

	// ShardsSegment and ClustersSegment name the scope's segments:
	// ServicePrefix + "/shards/{shard}/clusters/{cluster}". A kcp shard
	// addresses its own objects under "/clusters/{cluster}" too.
	ShardsSegment   = "shards"
	ClustersSegment = "clusters"
)

// JoinHostPath appends path to host, a client configuration's Host: a URL
// or host:port, possibly with a path of its own and a trailing slash. It is
// the one way this project extends a host with a path, so that no join
// doubles or drops the slash between them.
func JoinHostPath(host, path string) string {
	if path == "" {
		return host
	}
	return strings.TrimSuffix(host, "/") + "/" + strings.TrimPrefix(path, "/")
}

// HealthPaths are the health endpoints of every server here; each has
// individual checks below it ("/readyz/<check>"). They are served outside
// any partition: machines probe them without credentials and read only the
// status code.
var HealthPaths = []string{"/healthz", "/livez", "/readyz"}

// IsHealthPath reports whether p is a health endpoint or one of its checks.
func IsHealthPath(p string) bool {
	for _, h := range HealthPaths {
		if _, ok := CutPathPrefix(p, h); ok {
			return true
		}
	}
	return false
}

// MetricsPath is where every server here serves its metrics, with
// upstream's own below it ("/metrics/slis"). Like the health endpoints it is
// served outside any partition.
const MetricsPath = "/metrics"

// BackupPath serves a backup of a cache server's own etcd member: GET
// streams a consistent snapshot of it, in the format of etcd's
// Maintenance.Snapshot (what `etcdctl snapshot save` writes: the database
// followed by its SHA-256). Only system:masters may read it. A server on an
// external etcd answers a Status saying so; that etcd is backed up by its
// operator.
const BackupPath = "/kcp-cache/backup"

// IsMetricsPath reports whether p is MetricsPath or a path below it.
func IsMetricsPath(p string) bool {
	_, ok := CutPathPrefix(p, MetricsPath)
	return ok
}

// ScopedPathPrefix returns the URL prefix for a scope, for example
// "/services/cache/shards/amber/clusters/root". Append an API path to it.
func ScopedPathPrefix(s Scope) string {
	return ServicePrefix + "/" + ShardsSegment + "/" + s.Shard + "/" + ClustersSegment + "/" + s.Cluster
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
	rest, ok := CutPathPrefix(path, ServicePrefix)
	if !ok {
		return ParsedPath{APIPath: path}, nil
	}
	// rest is "" or starts with "/".
	parts := strings.SplitN(strings.TrimPrefix(rest, "/"), "/", 5)
	if len(parts) < 4 || parts[0] != ShardsSegment || parts[2] != ClustersSegment {
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

// CutPathPrefix is strings.CutPrefix that matches only on a segment
// boundary: "/services/cache" is a prefix of "/services/cache/x" but not of
// "/services/cachex". rest is "" or starts with "/"; on no match it returns
// path unchanged and false.
func CutPathPrefix(path, prefix string) (rest string, ok bool) {
	rest, ok = strings.CutPrefix(path, prefix)
	if !ok || (rest != "" && !strings.HasPrefix(rest, "/")) {
		return path, false
	}
	return rest, true
}

// WithPath returns req, or a copy of it that addresses path instead, for a
// filter on the server side or a round tripper on the client side; req
// itself is not modified. RawPath is cleared: scope segments never need
// escaping, and a stale RawPath would make url.URL.EscapedPath disagree
// with Path. RequestURI, set only on requests a server received, follows.
func WithPath(req *http.Request, path string) *http.Request {
	if req.URL.Path == path && req.URL.RawPath == "" {
		return req
	}
	out := new(http.Request)
	*out = *req
	u := *req.URL
	out.URL = &u
	out.URL.Path = path
	out.URL.RawPath = ""
	if req.RequestURI != "" {
		out.RequestURI = out.URL.RequestURI()
	}
	return out
}
