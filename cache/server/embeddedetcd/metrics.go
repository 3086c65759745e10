package embeddedetcd

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

var (
	dbSizeBytes = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace:      "kcp_cache",
		Subsystem:      "embedded_etcd",
		Name:           "db_size_bytes",
		Help:           "Size of the embedded etcd's database file, free pages included.",
		StabilityLevel: metrics.ALPHA,
	})
	dbSizeInUseBytes = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace:      "kcp_cache",
		Subsystem:      "embedded_etcd",
		Name:           "db_size_in_use_bytes",
		Help:           "Bytes of the embedded etcd's database file that hold data; the rest is free pages.",
		StabilityLevel: metrics.ALPHA,
	})
	// quotaBytes is the configured quota, which etcd refuses writes beyond
	// (NOSPACE alarm) and which it does not export itself here: its own
	// metrics are not in this server's registry. Against db_size_bytes it
	// tells how near the database is to refusing writes.
	quotaBytes = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace:      "kcp_cache",
		Subsystem:      "embedded_etcd",
		Name:           "quota_bytes",
		Help:           "The embedded etcd's backend quota: once the database file (db_size_bytes) reaches it, etcd refuses writes.",
		StabilityLevel: metrics.ALPHA,
	})
	defragmentations = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      "kcp_cache",
		Subsystem:      "embedded_etcd",
		Name:           "defragmentations_total",
		Help:           "Defragmentations of the embedded etcd's database, by result.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"result"})
	defragDuration = metrics.NewHistogram(&metrics.HistogramOpts{
		Namespace:      "kcp_cache",
		Subsystem:      "embedded_etcd",
		Name:           "defrag_duration_seconds",
		Help:           "How long a defragmentation blocked the embedded etcd.",
		Buckets:        metrics.ExponentialBuckets(0.01, 2, 12),
		StabilityLevel: metrics.ALPHA,
	})
	registerOnce sync.Once
)

// registerMetrics registers the member's metrics with the legacy registry
// (served at /metrics); safe to call more than once. A process with several
// members (tests) reports the one maintained last.
func registerMetrics() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(dbSizeBytes, dbSizeInUseBytes, quotaBytes, defragmentations, defragDuration)
	})
}
