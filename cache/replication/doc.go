// Package replication runs inside a kcp shard and makes the shard's partition
// of a kcp-cache server (shards/{shard}/clusters/*) an exact mirror of the
// shard's selected objects: one copy per local object, with the origin's
// identity, and nothing else.
//
// A Controller watches both sides for every replicated resource: the shard's
// own informers (LocalSource) and a cache informer over its partition. Any
// event on either side queues the object's Key; workers then compare the
// local object with its copy and act:
//   - local present, copy missing: create the copy;
//   - both present, different in anything but server-owned fields
//     (resourceVersion, the copy's uid, creationTimestamp, the
//     shard, cluster and provenance annotations): update the copy, at the
//     resourceVersion it was read at;
//   - copy with another UID (the name was deleted and created again on the
//     shard): delete it, with a UID precondition, and create it anew;
//   - local gone, filtered out, or being deleted with no finalizers left:
//     delete the copy, with a UID precondition.
//
// Editing or deleting a copy in the cache therefore triggers its repair, and
// a copy whose origin vanished while the shard was down is deleted when the
// controller starts.
//
//	cacheClient, _ := client.NewForConfig(cacheConfig)
//	ctrl, err := replication.NewController(&replication.Config{
//		Shard:        "amber",
//		CacheClient:  cacheClient,
//		LocalSources: replication.FactorySources(localFactory),
//	})
//	localFactory.Start(ctx) // after NewController, which asks for the informers
//	go ctrl.Run(ctx, 2)
//
// Guarantees:
//   - Mirror: once the queue is empty, every selected local object has one
//     copy in the shard's partition, equal to it in everything but
//     server-owned fields, and the partition holds no other copy.
//   - Identity: a copy carries its origin's uid, creationTimestamp,
//     generation and managedFields (field ownership), plus the provenance
//     annotations
//     cache.kcp.io/original-resource-version and
//     cache.kcp.io/original-resource-UID, refreshed on every write.
//   - Persistence: nothing is given up. Conflicts, transient errors and
//     failed local lookups are retried with per-object exponential backoff
//     (5ms doubling to 10s by default) until they succeed.
//   - Isolation: a controller reads and writes only its own shard's partition;
//     stopping it leaves its copies in place for other shards to read.
//   - Order: one key is never reconciled by two workers at once.
//
// Observability: Prometheus metrics under kcp_cache_replication_* in the
// component-base legacy registry (reconciles by result, lag from local event
// to acknowledged cache write, copies per resource, work queue depth), and
// contextual logs from a logger named "replication" that carries the shard,
// and the resource and cluster of each reconcile.
package replication
