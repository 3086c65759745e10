package client

import "context"

type contextKey int

const (
	shardContextKey contextKey = iota
	clusterContextKey
)

// WithShard returns a context whose requests the shard round tripper sends to
// shard. Use kcpcache.Wildcard for every shard.
func WithShard(ctx context.Context, shard string) context.Context {
	return context.WithValue(ctx, shardContextKey, shard)
}

// WithCluster returns a context whose requests the cluster round tripper sends
// to the logical cluster named cluster. Use kcpcache.Wildcard for every cluster.
func WithCluster(ctx context.Context, cluster string) context.Context {
	return context.WithValue(ctx, clusterContextKey, cluster)
}

// ShardFrom returns the shard set by WithShard, if any.
func ShardFrom(ctx context.Context) (string, bool) {
	s, ok := ctx.Value(shardContextKey).(string)
	return s, ok && s != ""
}

// ClusterFrom returns the cluster set by WithCluster, if any.
func ClusterFrom(ctx context.Context) (string, bool) {
	c, ok := ctx.Value(clusterContextKey).(string)
	return c, ok && c != ""
}
