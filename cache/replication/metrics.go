package replication

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

const (
	metricsNamespace = "kcp_cache"
	metricsSubsystem = "replication"
)

// Every metric is labelled at most by resource (the configured types'
// group-qualified resource names) and result (the action names), so label
// cardinality is bounded by configuration, never by data. Several
// controllers in one process (one per shard, as in tests) add up.
var (
	reconcilesTotal = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      metricsNamespace,
		Subsystem:      metricsSubsystem,
		Name:           "reconciles_total",
		Help:           "Reconciles of replicated objects by resource and result: created, updated, deleted, recreated, unchanged or error.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"resource", "result"})

	lagSeconds = metrics.NewHistogramVec(&metrics.HistogramOpts{
		Namespace: metricsNamespace,
		Subsystem: metricsSubsystem,
		Name:      "lag_seconds",
		Help:      "Time from a local change observed by the controller to the cache acknowledging the write that replicates it.",
		// From one loopback round trip to a cache outage with backoff.
		Buckets:        []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60},
		StabilityLevel: metrics.ALPHA,
	}, []string{"resource"})

	objectsGauge = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace:      metricsNamespace,
		Subsystem:      metricsSubsystem,
		Name:           "objects",
		Help:           "Copies in the shard's cache partition, by resource, as the controller's cache informer sees them.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"resource"})

	originRegressionsTotal = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      metricsNamespace,
		Subsystem:      metricsSubsystem,
		Name:           "origin_regressions_total",
		Help:           "Copies found recording a newer origin resourceVersion than the shard's object has (the shard went back in time, e.g. restored from a backup), by resource. They are mirrored anyway.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"resource"})

	epochChangesTotal = metrics.NewCounter(&metrics.CounterOpts{
		Namespace:      metricsNamespace,
		Subsystem:      metricsSubsystem,
		Name:           "cache_epoch_changes_total",
		Help:           "Full convergences started because the cache announced a new epoch (a new or restored etcd behind it).",
		StabilityLevel: metrics.ALPHA,
	})

	registerOnce sync.Once
)

// registerMetrics registers the package's metrics with the legacy registry,
// once per process; component-base metrics record nothing until registered.
func registerMetrics() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(reconcilesTotal, lagSeconds, objectsGauge, originRegressionsTotal, epochChangesTotal)
		for _, m := range queueMetrics.all() {
			legacyregistry.MustRegister(m)
		}
	})
}
