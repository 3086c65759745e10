// Package mirror makes a cache one member of a hierarchy of caches
// ("regions"). Every shard pushes to one cache, its home; a cache given peers
// pulls from each peer the partitions whose home that peer is and serves
// them too, so that a region whose cache is lost still has every partition
// readable elsewhere.
//
// Whose partition is whose: a shard's home is a claim (shard, home,
// generation) that caches persist and learn from each other's tables, never
// from data (package homes, which also admits the writes into a partition
// only where the claim names this cache). The mirror reads the claims; the
// claims know nothing of the mirror but that it wants to hear when a
// shard's home changes (Table.OnHomeChange).
//
// What is mirrored: for each peer and each type this cache serves, one
// stream lists and then watches the peer's wildcard (every shard, every
// cluster) and applies, in the peer's order, every object of the shards
// whose claim the peer holds. The claim alone says whose an object is, not
// its annotations: a partition is only ever taken from its home and never
// back to it, so a mesh in which every cache peers with every other (a
// cycle) cannot echo, and a shard's new home (moving.go) is followed from
// the copies it mirrored before. A copy here keeps the home's uid,
// creation time, managed fields and provenance annotations, and gains the
// copy bookkeeping (kcpcache.CopyBookkeeping), which only peers and this
// server are served (package partition, bookkeeping.go). A relist makes
// the mirror exact: copies of the peer's partitions that the peer no longer
// holds are deleted.
//
// Freshness: each stream records the peer revision it has applied every
// change up to (list resourceVersions, events, bookmarks). A consistent read
// of a mirrored partition asks the home for its revision of that data
// (kcpcache.RevisionPath) and waits until the stream has reached it, or
// refuses with 503 and a reason; a read that names a resourceVersion is
// served at once with its freshness in response headers. See filter.go.
//
// The files:
//
//   - mirror.go: Mirror, its Config, New and Run; source, a peer as the
//     mirror pulls from it (the homes.Peer and its streams); the streams a
//     read covers;
//   - stream.go: one peer's one type: list, then watch, in the peer's
//     order; what it has applied and when the peer last confirmed it;
//   - apply.go: a peer's objects applied as copies, by the claims and
//     routes;
//   - relay.go: what crosses hops: relayed copies, the state of a relayed
//     home in its own revisions, the answers this cache gives as a relay;
//   - filter.go: WithHierarchy, the reads of a named cache;
//   - freshness.go: a consistent read confirmed with its homes (Confirm)
//     or refused with a reason, a stale read's revisions and ages (Stale);
//   - header.go: what makes a stale read's home-revision header exact
//     (the streams held, the local revision it is served at: serveAt);
//   - restored.go and originconvergence.go: a restored home's partitions
//     held until the shard converged there again, by its heartbeat or by
//     its objects' origins;
//   - moving.go: following a shard to its new home, and an adopted shard's
//     copies made this cache's own;
//   - lag.go and metrics.go: the partitions' lag behind their homes, and
//     the mirror's metrics.
package mirror
