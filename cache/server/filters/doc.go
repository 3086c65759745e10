// Package filters holds the HTTP half of the cache's partitioning.
//
// WithPartition runs outermost, before upstream resolves request info: it
// owns the URL contract /services/cache/shards/{shard}/clusters/{cluster}/...,
// validates both names, puts the scope into the context and hands the rest of
// the path to the stock Kubernetes handlers (CachePaths is that grammar).
//
// WithRequestGuard runs innermost, after authentication, authorization and
// request-info resolution, so that what it refuses is still audited and
// counted: writes and GET-by-name through wildcards, streaming initial lists
// on wildcards, CRD deletions that package removal refuses (bootstrapped or
// in use); and it carries a pushed copy's origin metadata from the body to
// storage.
package filters
