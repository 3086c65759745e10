package removal

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

// Reasons a partition is purged: the label values of the purge metrics.
const (
	ReasonHeartbeatExpired = "heartbeat_expired"
	ReasonShardDeleted     = "shard_deleted"
)

var (
	partitionPurges = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      "kcp_cache",
		Subsystem:      "removal",
		Name:           "partition_purges_total",
		Help:           "Purges of a shard's partition, by reason and result (purged, interrupted: the shard came back, error).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"reason", "result"})
	purgedObjects = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      "kcp_cache",
		Subsystem:      "removal",
		Name:           "purged_objects_total",
		Help:           "Objects deleted by partition purges, by reason.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"reason"})
	removedTypes = metrics.NewCounter(&metrics.CounterOpts{
		Namespace:      "kcp_cache",
		Subsystem:      "removal",
		Name:           "removed_types_total",
		Help:           "Types added at runtime whose CRD was deleted because they held no objects for the type retention.",
		StabilityLevel: metrics.ALPHA,
	})
	registerOnce sync.Once
)

// registerMetrics registers the removal metrics with the legacy registry
// (served at /metrics) once, when the first purger or reaper is made.
func registerMetrics() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(partitionPurges, purgedObjects, removedTypes)
	})
}
