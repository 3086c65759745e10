// Package shardserver is a stand-in for kcp's pkg/server: a shard process
// that stores kcp types per logical cluster (served kcp-style under
// /clusters/{cluster}/...), optionally serves a cache in-process, pushes its
// APIExports and APIResourceSchemas into the cache, and runs an example
// controller that resolves APIBindings to APIExports local first, cache as
// fallback. It shows the few lines of wiring kcp needs; it is not kcp.
//
// Its lifecycle is the cache server's: New starts the etcd it needs and
// builds everything, Run serves (the in-process cache stops before the
// host), Close stops whatever still runs and is always safe to defer.
package shardserver
