// Package kcplayout moves a cache's objects between the etcd key layout of
// kcp's own cache-server and this server's, so that a cache can replace
// kcp's on the same data (Migrate, at every start) and kcp's can take over
// again (Export, an offline step).
//
// The two layouts, below the etcd prefix (kcp's fork, store_kcp.go; ours,
// partition/keys.go):
//
//	kcp:  <group>/<resource>/customresources/<shard>/<cluster>/[<namespace>/]<name>
//	      <group>/<resource>/<identity>/<shard>/<cluster>/[<namespace>/]<name>
//	ours: <group>/<resource>/<shard>/<cluster>/[<namespace>/]<name>
//	      <group>/<resource>:<identity>/<shard>/<cluster>/[<namespace>/]<name>
//
// A resource of the core group (a CachedResource may publish ConfigMaps)
// has no group segment in either. Identities are what kcp's cache-server
// writes under for the resources of CachedResources (an APIExport's own
// types are kept under customresources whatever identity the path names).
//
// CRDs are kept at <group>/<resource>/<shard>/<cluster>/<name> by both. kcp
// takes the shard and the cluster from the key alone and may store objects
// without the kcp.io/shard and kcp.io/cluster annotations (its RBAC CRDs,
// objects written without them); this server's watch caches key every
// object by those annotations and cannot start while one lacks them.
//
// Why a migration at start and not a server that reads both layouts: the
// key layout is computed in one place that the request path and the watch
// cache must agree on exactly (partition/keys.go), and every reader of etcd
// beside them (the union of identities, data removal, the revisions of
// partitions, backups) walks the same layout. Reading two layouts would put
// a second layout into each of them for as long as the server runs, and a
// write to an object found in kcp's layout would have to move it anyway. A
// migration before the API server builds any storage leaves one layout for
// all of them, and costs one keys-only scan of the prefix on a start where
// nothing is left to move.
//
// Guarantees of Migrate and Export:
//   - Nothing acknowledged is lost: an object moves in one etcd transaction
//     that writes the new key and deletes the old one, conditioned on both
//     keys' revisions as read, so an interruption leaves the object at one
//     of its two keys, never at neither.
//   - Running again is safe, whenever it was interrupted: what moved is not
//     found again, what did not is moved then.
//   - When an object is at both keys (kcp's cache-server ran on data this
//     server left, and the shards pushed the object again), the later write
//     wins: the older key is deleted.
//   - A key outside both layouts, or whose value is not a JSON object that
//     names itself as its key does, is left as it is and counted
//     (Report.Skipped); it never fails the move.
package kcplayout
