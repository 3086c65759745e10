package cache

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// A shard's heartbeat is one object the shard's hook renews in its own
// partition, so that silence (nothing to replicate) and death (no hook) can
// be told apart, and consumers can see how current a partition is. It lives
// in a reserved cluster of the shard's partition, under the shard's name:
//
//	/services/cache/shards/<s>/clusters/system:cache-heartbeat/apis/cache.kcp.io/v1alpha1/shardheartbeats/<s>
//
// The type is the cache's own (kcp's cache server has no such type); a kcp
// shard that does not run our hook simply has no heartbeat, and its freshness
// is unknown.
const (
	// HeartbeatCluster is the reserved cluster of every shard's partition
	// holding that shard's heartbeat. Only the shard itself (and
	// system:masters) writes there, and only heartbeats. It is a valid
	// logical cluster name ("system:" and a DNS label, so partition paths
	// accept it) that starts with the reserved "system:cache".
	HeartbeatCluster = "system:cache-heartbeat"
	// HeartbeatKind is the kind of a heartbeat object.
	HeartbeatKind = "ShardHeartbeat"
)

// HeartbeatResource is the heartbeat type's group, version and resource.
var HeartbeatResource = schema.GroupVersionResource{Group: "cache.kcp.io", Version: "v1alpha1", Resource: "shardheartbeats"}

// HeartbeatSpec is what the shard writes in a heartbeat's spec. It follows
// coordination.k8s.io Leases: the holder renews RenewTime at least every
// LeaseDurationSeconds; a heartbeat older than that is expired.
type HeartbeatSpec struct {
	// RenewTime is when the shard last renewed the heartbeat (its clock).
	RenewTime metav1.MicroTime `json:"renewTime"`
	// LeaseDurationSeconds is how long after RenewTime the heartbeat is
	// still current.
	LeaseDurationSeconds int32 `json:"leaseDurationSeconds"`

	// Converged is true when, at RenewTime, the shard's replication had
	// reconciled every key it knew of since it last converged in full: the
	// partition mirrored the shard as the shard's informers saw it.
	Converged bool `json:"converged"`
	// PendingKeys counts the objects with a change not yet replicated (or a
	// failed write waiting for its retry) at RenewTime.
	PendingKeys int64 `json:"pendingKeys"`
	// Epoch is the cache epoch (see EpochHeader) in which the shard last
	// converged its partition in full; empty before it ever has. A consumer
	// that sees another epoch on the cache's responses knows the partition
	// has not been re-pushed since the cache's data changed under it
	// ("unconfirmed").
	Epoch string `json:"epoch,omitempty"`
	// Objects counts the copies in the partition, all replicated types
	// together (per type in Resources).
	Objects int64 `json:"objects"`
	// OriginRegressions counts the copies the shard found recording a newer
	// origin resourceVersion than the shard's own object has, since the hook
	// started: the shard went back in time (a restore from a backup). They
	// are mirrored anyway; the origin is the truth.
	OriginRegressions int64 `json:"originRegressions"`
	// Resources reports each replicated type.
	Resources []HeartbeatResourceStatus `json:"resources,omitempty"`
}

// HeartbeatResourceStatus is one replicated type in a heartbeat.
type HeartbeatResourceStatus struct {
	// Resource is the type as "resource.group".
	Resource string `json:"resource"`
	// Objects counts the type's copies in the partition, as the shard's
	// replication sees them.
	Objects int64 `json:"objects"`
	// NewestOriginResourceVersion is the newest (highest) origin
	// resourceVersion of an object of the type whose copy the shard has
	// confirmed since the hook started; empty before the first.
	NewestOriginResourceVersion string `json:"newestOriginResourceVersion,omitempty"`
}

// Heartbeat is a heartbeat object as clients decode it.
type Heartbeat struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              HeartbeatSpec `json:"spec"`
}

// EpochHeader is the response header in which the cache server announces
// its epoch on every response under ServicePrefix. The epoch changes when
// the cache's data may have gone back in time or vanished: a new etcd, a
// restored backup, an in-memory cache that restarted. resourceVersions of
// two epochs are not comparable, so a client relists rather than resumes a
// watch across an epoch change, and a shard converges its partition in full
// again. A server that sends no such header (kcp's own cache server) has
// one unknown epoch, "".
const EpochHeader = "Kcp-Cache-Epoch"
