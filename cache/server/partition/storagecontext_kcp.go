//go:build kcp

package partition

import (
	"context"

	"github.com/kcp-dev/logicalcluster/v3"
	"k8s.io/apiserver/pkg/endpoints/request"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

// This file is the kcp build (kcp's Kubernetes fork): the fork's registry,
// etcd3 store and cacher read a shard and a logical cluster from the request
// context. storagecontext_upstream.go is the upstream build, where nothing
// reads them.

// RequestContext puts the fork's view of scope s into the context of an HTTP
// request. The shard is always the fork's wildcard: the fork's registry key
// functions then build the same keys as upstream's (<prefix>/[<ns>/]<name>),
// and scopedStorage inserts the partition as in the upstream build. The
// cluster is set because the fork's handlers and apiextensions read it (a
// missing one fails them); "*" is the fork's wildcard.
func RequestContext(ctx context.Context, s kcpcache.Scope) context.Context {
	return request.WithCluster(request.WithShard(ctx, request.Shard(kcpcache.Wildcard)), forkCluster(s.Cluster))
}

// storageContext puts the partition that scopedStorage reads or writes into
// the context it hands the fork's storage. The fork's etcd3 store stamps
// kcp.io/shard and kcp.io/cluster on every object it decodes from these
// (from the key, below the prefix read, when they are wildcards), so they
// must be the partition's own: its stamps then equal the annotations
// scopedStorage stored. A wildcard scope reads every cluster below its key
// prefix (the cluster is a field filter), so its cluster is the wildcard.
func storageContext(ctx context.Context, s kcpcache.Scope) context.Context {
	cluster := s.Cluster
	if s.IsWildcard() {
		cluster = kcpcache.Wildcard
	}
	return request.WithCluster(request.WithShard(ctx, request.Shard(s.Shard)), forkCluster(cluster))
}

// unscopedStorageContext is the context of the watch cache's own reads of
// the raw storage (its list and watch, its consistency checks): the fork's
// cacher sets a wildcard cluster and no shard, with which the fork's store
// would take the cluster from the first key segment, our shard. Requests
// that scopedStorage delegates already carry their shard and pass unchanged.
func unscopedStorageContext(ctx context.Context) context.Context {
	if !request.ShardFrom(ctx).Empty() {
		return ctx
	}
	return storageContext(ctx, everything)
}

func forkCluster(name string) request.Cluster {
	if name == kcpcache.Wildcard {
		return request.Cluster{Wildcard: true}
	}
	return request.Cluster{Name: logicalcluster.Name(name)}
}
