// Package fallback answers reads of a lost kcp shard's workspaces from the
// kcp cache, in kcp's front-proxy, for kcp's users.
//
// kcp's front-proxy sends /clusters/<workspace>/... to the shard its index
// names. When that shard does not answer (a refused connection, a timeout,
// or a 502/503/504 to a read), Fallback.Wrap hands the request to Serve,
// which:
//   - serves get, list and watch of the user-read types (kcpcache.UserReadTypes,
//     pushed by the shard's replicator into its user-read partition
//     kcpcache.UserReadPartition) and the workspace's discovery, from the
//     region's cache, with a Warning naming the shard and how long ago it
//     last confirmed the data (the partition's heartbeat);
//   - refuses writes, subresources and types that are not replicated with
//     503 and a Status that says so, and any request it cannot place in one
//     workspace;
//   - decides access as the shard's own authorizers would, from the
//     replicated RBAC and LogicalCluster (authorize.go lists the steps),
//     and denies (403, naming the fallback) wherever it cannot decide
//     exactly as the shard would: an allow is never wider than the shard's;
//   - refuses (503, naming shard and cache) when the cache cannot answer or
//     cannot vouch for the partition (no heartbeat, another cache epoch);
//   - keeps the cache's and the shard's resourceVersions apart: a version
//     handed out by the fallback carries a prefix, and crossing between the
//     two histories is a 410 (list again) or a read of the current state.
//
// Nothing is cached in the fallback: every request reads what it needs from
// the cache, and the next request after the shard answers again goes to the
// shard. A watch served from the cache ends after Config.MaxWatch, so that
// its client comes back and reaches the shard.
//
// docs/fallback.md is the design: the kcp patch, what the fallback trusts,
// and the authorization model.
package fallback
