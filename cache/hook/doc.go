// Package hook wires a cache into a host server (a kcp shard): a post-start
// hook that starts the replication controller and a second informer factory
// over the cache (the "global" informers), and the degraded state that
// reports trouble with the cache without ever making the host unhealthy.
//
// Guarantees:
//   - The hook returns at once; everything that can fail runs in the
//     background and retries with backoff, so /healthz, /livez and /readyz
//     of the host do not depend on the cache.
//   - Trouble is visible: GET /readyz/cache-replication (not part of the
//     aggregate /readyz) answers 503 with the reason, the gauge
//     kcp_cache_degraded{reason} is 1 for the current reason, and each
//     transition is logged.
//   - Nothing is lost while degraded: the replication controller converges
//     the shard's partition fully once the cache is back.
package hook
