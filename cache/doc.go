// Package cache holds the vocabulary shared by every part of kcp-cache: the
// annotations that tie a copy to its shard and logical cluster, the scope a
// request is served in (a shard and a cluster, either of which may be the
// read-only wildcard "*"), the URL layout that carries that scope (the
// service prefix, the shards and clusters segments, the health paths, and
// the segment-aware prefix cut and path rewrite that client round trippers,
// server filters and storage keys share), and the context helpers that move
// the scope from the HTTP layer to storage.
//
// No other package re-defines these names; import them from here, always
// as kcpcache (.ci/run checks it), so that a bare "cache" in this project is
// only ever client-go's tools/cache. The
// package depends on nothing but the standard library and kcp's
// logicalcluster, so the shard-side packages (client, replication, hook,
// options) can use it without the server.
package cache
