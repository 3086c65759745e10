package client

import (
	"strings"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

// isUnscoped reports whether p is served outside any partition; rewriting
// it would break health checks and metrics scraping through a routed config.
func isUnscoped(p string) bool {
	return kcpcache.IsMetricsPath(p) || kcpcache.IsHealthPath(p)
}

// requestPath is a request path split into the parts the round trippers edit:
// an optional /shards/{s}, an optional /clusters/{c}, and the API path after
// them. The service prefix is always rendered, so every round tripper yields a
// canonical path whatever order they are composed in.
type requestPath struct {
	shard, cluster       string
	hasShard, hasCluster bool
	// rest is the API path after the scope: "" or starting with "/".
	rest string
}

// parseRequestPath splits p. It returns false for paths that must be left
// alone (health and metrics endpoints). The service prefix is only recognised
// at the start of p: an API path may legitimately contain "/services/cache"
// (a core Service named "cache"), so it is never searched for.
func parseRequestPath(p string) (requestPath, bool) {
	if isUnscoped(p) {
		return requestPath{}, false
	}
	var rp requestPath
	rest, _ := kcpcache.CutPathPrefix(p, kcpcache.ServicePrefix)
	rp.shard, rest, rp.hasShard = cutNamedSegment(rest, kcpcache.ShardsSegment)
	rp.cluster, rest, rp.hasCluster = cutNamedSegment(rest, kcpcache.ClustersSegment)
	rp.rest = rest
	return rp, true
}

// String renders the canonical path.
func (p requestPath) String() string {
	var b strings.Builder
	b.WriteString(kcpcache.ServicePrefix)
	if p.hasShard {
		b.WriteString("/" + kcpcache.ShardsSegment + "/" + p.shard)
	}
	if p.hasCluster {
		b.WriteString("/" + kcpcache.ClustersSegment + "/" + p.cluster)
	}
	b.WriteString(p.rest)
	return b.String()
}

// cutNamedSegment cuts "/{name}/{value}" from the start of p. "/{name}" alone
// counts as the segment with an empty value, which the round trippers fill.
func cutNamedSegment(p, name string) (value, rest string, ok bool) {
	rest, ok = kcpcache.CutPathPrefix(p, "/"+name)
	if !ok {
		return "", p, false
	}
	if rest == "" {
		return "", "", true
	}
	value, after, found := strings.Cut(rest[1:], "/")
	if !found {
		return value, "", true
	}
	return value, "/" + after, true
}
