// Package client talks to a kcp-cache server with plain client-go.
//
// A kcp-cache server partitions every resource by shard and logical cluster
// under /services/cache/shards/{shard}/clusters/{cluster}/...; "*" in either
// position is a read-only wildcard. This package hides that URL layout:
//
//   - Configs: NewConfig, ScopedConfig, ConfigFromKubeconfig and ConfigFromURL
//     build rest.Configs that speak JSON and target one scope, or route each
//     request by the shard and cluster in its context (WithShard, WithCluster).
//   - Round trippers that add the service prefix, the shard and the cluster to
//     request paths, and one that sends a write to the shard its object names.
//     They compose through rest.Config.Wrap in any order.
//   - ClusterClient: Cluster(shard, cluster).Resource(gvr) is a dynamic client
//     for one scope, so callers never build paths by hand.
//   - InformerFactory: shared informers over one scope (by default "*/*") that
//     key objects by shard, cluster, namespace and name (KeyFunc, SplitKey),
//     index them by cluster, cluster and name, shard, and workspace path and
//     name, and report how fresh they are (Informer.Freshness).
//   - Fallback: local-first, cache-second lookups, as kcp shards do them.
//   - No time travel across caches: configs from NewConfig refuse a response
//     that reflects an older state of a home than one already seen
//     (TimeTravelError, hometravel.go), so a reader that fails over to a
//     mirror that is behind retries instead of seeing objects go back.
//
// The informers never use streaming lists (sendInitialEvents=true): a
// kcp-cache server refuses them on wildcard scopes, and client-go's watch-list
// buffer keys objects by namespace and name, which would collapse copies of the
// same name from different clusters. They list and then watch.
//
// Guarantees:
//   - Two objects that differ in shard or cluster never share a store key.
//   - Lookups report errors; only a missing object is a NotFound, and it is an
//     apierrors NotFound so callers can test it with apierrors.IsNotFound.
//   - Handlers see events for one informer in the order the server sent them.
package client
