// Package removal is where the cache's data of what is gone is removed:
// gone shards' partitions and unused types directly in etcd, in bounded
// batches, and deleted CRDs' objects through the API:
//
//   - ShardPurger purges the whole partition of a shard (every type, every
//     cluster) whose heartbeat has been expired for longer than a retention
//     period, or whose core.kcp.io Shard object was deleted from the cache.
//     A shard with a fresh heartbeat is never purged: each batch is deleted
//     in one etcd transaction that also checks the heartbeat has not been
//     renewed since the decision, so a shard that comes back mid-purge stops
//     the purge, and then pushes its objects again.
//   - TypeReaper deletes the CRD of a type added at runtime that has held no
//     objects in any partition for a retention period; bootstrapped types
//     are never removed.
//   - CRDDeletion decides whether a CRD may be deleted at all (never a
//     bootstrapped one, never one whose objects are still stored); the
//     request guard asks it. CRDPurger deletes, partition by partition, the
//     objects that arrived after that check, which upstream's CRD finalizer
//     cannot address, so that a deleted CRD does not hang in Terminating.
//
// Deleting in etcd rather than object by object through the API costs one
// transaction per batch instead of a request per object; the watch caches
// and every watcher still see each deletion as a DELETED event, because
// they follow etcd's watch. The key layout is the partition package's:
// <prefix>/<group>/<resource>/<shard>/<cluster>/[<namespace>/]<name>.
package removal
