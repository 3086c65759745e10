// Package homerevision tells, at a cache that is the home of some shards'
// data, the etcd revision of the last change to each partition's objects of
// each type: the number a mirror of this cache must have reached before it
// may answer a consistent read of that data (kcpcache.RevisionPath).
//
//   - Tracker follows every write below the storage prefix with one raw
//     etcd watch and keeps, per (shard, group/resource), the revision of the
//     last put or delete. Revision answers it after a barrier, so that the
//     answer covers every write acknowledged before the call; Known answers
//     what the watch has processed, without waiting.
//   - Handler serves RevisionPath from a Tracker.
//
// Guarantees:
//   - Revision never decreases for a (shard, group/resource) while the
//     process runs, across re-initialisations after a watch failure.
//   - Revision(shard, gr) is at least the revision of every change to
//     shard's objects of gr that etcd had acknowledged when it was called.
//   - A deletion is a change: deleting the last object moves the revision.
//     Deletions before the tracker (re)initialised are not individually
//     known, so every answer is at least the revision of that
//     initialisation (the floor).
//
// The key layout is the partition package's:
// <prefix>/<group>/<resource>/<shard>/<cluster>/[<namespace>/]<name>, the
// core group being the empty segment. Keys outside it (CRDs, the epoch
// marker) move no partition's revision.
package homerevision
