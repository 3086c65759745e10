// Package authorization decides who may do what in which partition of the
// cache. It reads the request's partition scope (put into the context by the
// partition filter, which runs before authentication), so one rule set covers
// every URL shape.
//
// The policy is one ordered table of named rules (rules.go): each says whom
// it concerns, which requests, and whether it allows or denies them; the
// first rule that matches a request decides, and a request none matches gets
// no opinion, so that the server's path authorizer (health, /version) and a
// host's authorizer can follow in the union, with NewDefaultDeny last. In
// short:
//
//   - No one writes CRDs through a partition path, and no one stores data
//     objects in the system partition through an unprefixed path;
//     system:masters may do everything else.
//   - A shard, user system:kcp:shard:<s>, writes only below
//     shards/<s>/clusters/<cluster>/... and its user-read partition
//     shards/<s>:readonly/clusters/<cluster>/..., and reads every partition
//     and every wildcard. The group system:kcp:cache:readers and peer caches read like
//     a shard and never write.
//   - The group system:kcp:cache:metrics-readers reads /metrics and the
//     health endpoints, nothing else.
//   - Partition paths naming a reserved shard or cluster are for
//     system:masters only, but for the shards' heartbeats.
//
// PolicyDoc renders the table for docs/security.md. Every decision names its
// rule in the audit event's reason; a denial names it in the 403 Status and
// the counter kcp_cache_authorization_denials_total{rule} too.
package authorization
