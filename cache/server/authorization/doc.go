// Package authorization decides who may do what in which partition of the
// cache. It reads the request's partition scope (put into the context by the
// partition filter, which runs before authentication), so one rule set covers
// every URL shape:
//
//   - system:masters may do everything, except what no one may do (below).
//   - A shard, user system:kcp:shard:<s>, writes only below
//     shards/<s>/clusters/<cluster>/..., and reads every partition and every
//     wildcard. It reaches nothing in the system partition.
//   - The group system:kcp:cache:readers reads like a shard and never writes.
//   - No one writes CRDs through a partition path (they would be stored in a
//     partition, never served, and their deletion would hang), and no one
//     stores data objects in the system partition through an unprefixed path.
//   - Partition paths naming a reserved shard or cluster (system:cache...,
//     the system partition's names) are for system:masters only.
//   - Everyone else gets a final, named denial (health endpoints are allowed
//     by a path authorizer before it).
//
// Every denial names its rule in the 403 Status, the audit event's reason
// annotation and the counter kcp_cache_authorization_denials_total{rule}.
package authorization
