// Package homes is a named cache's table of home claims: whose partition
// is whose in a hierarchy of caches ("regions"), and so where a shard may
// write. Every named cache has one, peers or not; the mirror (package
// mirror) reads it to know which peer's objects to take, never the
// reverse.
//
// A shard's home is a claim (shard, home cache, generation), never
// inferred from data or from who wrote: a write that lands at the wrong
// cache must not move a home, or the home's mirrors would treat its objects
// as copies and replace them with the one written elsewhere.
//
//   - A cache holds the claims it made and learns its peers' by reading
//     their tables (kcpcache.HomesPath) every few seconds; both are
//     persisted in its storage, so a restart keeps them, and a cache whose
//     storage was lost gets its own claims back from its peers (a learnt
//     claim naming it).
//   - A write into a shard's partition is accepted only where the highest
//     claim names this cache. With no claim known, the cache searches
//     every cache of the hierarchy, through its peers: only when every
//     cache answered and none knows a home (nor is claiming the shard
//     itself) does it claim the shard, at generation 1.
//   - A home moves only by --adopt-shard: the new home claims the shard at
//     one more than the highest generation it or a reachable peer knows.
//     The old home, learning the higher claim, gives the shard up.
//   - Two claims of the same generation naming different homes are a
//     conflict: reported, never resolved by deleting data; the operator
//     resolves it with --adopt-shard at the cache that should win.
//
// The files:
//
//   - table.go: the Table, what it persists, and what it knows (Lookup,
//     HomedElsewhere, Known, Answer); learning a peer's claims (merge);
//   - admit.go: the decision on a write (Admit: accepted, 403 naming the
//     home, or 503 with its reason), and the filter that applies it to
//     every write into a partition (WithWriteAdmission);
//   - peers.go: asking the peers for their tables, and the loop that does
//     so every few seconds after --adopt-shard has acted (Run);
//   - search.go: searches, a question about one shard's claim forwarded
//     through every cache (claims, and consistent reads of shards whose
//     claim is unknown), and the shards pending at a cache: claimed
//     elsewhere a moment ago;
//   - adopt.go: --adopt-shard;
//   - routes.go: the routes (which peer each home's partitions are taken
//     from, by path vectors) and --pass-on;
//   - handler.go: the table's answer at kcpcache.HomesPath;
//   - peer.go: Peer, a peer cache and its one client;
//   - metrics.go: the claims' metrics.
package homes
