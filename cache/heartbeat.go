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
//	/services/cache/shards/<s>/clusters/system:cache:heartbeat/apis/cache.kcp.io/v1alpha1/shardheartbeats/<s>
//
// The type is the cache's own (kcp's cache server has no such type); a kcp
// shard that does not run our hook simply has no heartbeat, and its freshness
// is unknown.
const (
	// HeartbeatCluster is the reserved cluster of every shard's partition
	// holding that shard's heartbeat. Only the shard itself (and
	// system:masters) writes there, and only heartbeats.
	HeartbeatCluster = "system:cache:heartbeat"
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
}
