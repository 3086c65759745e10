package mirror

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

var (
	registerOnce sync.Once

	appliedRevision = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace:      "kcp_cache",
		Subsystem:      "mirror",
		Name:           "applied_revision",
		Help:           "The peer revision up to which every change of the type is applied here.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"peer", "resource"})
	objects = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace:      "kcp_cache",
		Subsystem:      "mirror",
		Name:           "objects",
		Help:           "Copies whose home is the peer, per type, at the last list.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"peer", "resource"})
	writes = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      "kcp_cache",
		Subsystem:      "mirror",
		Name:           "writes_total",
		Help:           "Writes of mirrored copies, by peer and kind of write.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"peer", "write"})
	streamRestarts = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      "kcp_cache",
		Subsystem:      "mirror",
		Name:           "stream_restarts_total",
		Help:           "Mirror streams that failed and started over with a list.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"peer"})
	freshnessChecks = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      "kcp_cache",
		Subsystem:      "mirror",
		Name:           "freshness_checks_total",
		Help:           "Consistent reads of mirrored data, by home and result (fresh, or the reason of the 503).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"home", "result"})
	heldPartitions = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace:      "kcp_cache",
		Subsystem:      "mirror",
		Name:           "held_partitions",
		Help:           "Partitions whose copies are held because their home changed epoch, until their shard converges there again.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"peer"})
	partitionLagRevisions = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace:      "kcp_cache",
		Subsystem:      "mirror",
		Name:           "partition_lag_revisions",
		Help:           "How many revisions of its home a partition's copies of a type are behind: the home's revision of the partition's last change minus the revision applied here (0 when current), updated every 10 seconds. One series per shard homed at a peer and type the home holds.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"home", "shard", "resource"})
	partitionLagSeconds = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace:      "kcp_cache",
		Subsystem:      "mirror",
		Name:           "partition_lag_seconds",
		Help:           "Seconds since this mirror first saw the partition's copies of a type behind its home (0 when current), updated every 10 seconds.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"home", "shard", "resource"})
	confirmedAge = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace:      "kcp_cache",
		Subsystem:      "mirror",
		Name:           "confirmed_age_seconds",
		Help:           "Seconds since the peer last confirmed the copy of a type (event, bookmark, list or freshness check), updated every 10 seconds.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"peer", "resource"})
)

// registerMetrics registers the mirror's metrics in the process's registry
// once, when the first Mirror is built (as the server's other packages
// register theirs at first use).
func registerMetrics() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(partitionLagRevisions, partitionLagSeconds, heldPartitions, appliedRevision, objects, writes, streamRestarts, freshnessChecks, confirmedAge)
	})
}
