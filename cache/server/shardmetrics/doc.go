// Package shardmetrics exports what the shards' heartbeats say as per-shard
// gauges (kcp_cache_shard_*), and the cache's epoch as kcp_cache_epoch_info.
// A Watcher follows every heartbeat through the server's loopback client.
package shardmetrics
