// Package shardmetrics exports what the shards' heartbeats say as per-shard
// gauges (kcp_cache_shard_*). A Watcher follows every heartbeat through the
// server's loopback client.
package shardmetrics
