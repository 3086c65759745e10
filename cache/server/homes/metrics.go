package homes

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

var (
	registerOnce sync.Once

	// homeInfo keeps the name it had when the mirror held the table.
	homeInfo = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace:      "kcp_cache",
		Subsystem:      "mirror",
		Name:           "shard_home_info",
		Help:           "1 for each shard and the cache that is its home, as this cache knows it.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"shard", "home"})
	homeConflicts = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace:      "kcp_cache",
		Name:           "home_conflicts",
		Help:           "Shards two caches claim at the same generation, as this cache knows them: writes and consistent reads of them are refused until the operator resolves the conflict with --adopt-shard.",
		StabilityLevel: metrics.ALPHA,
	})
	searches = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      "kcp_cache",
		Name:           "home_searches_total",
		Help:           "Searches this cache made for a shard's claim through every cache, by result: found (a claim), none (every cache answered, none knows one), claiming (a cache was claiming it), unreached (a cache no path reached).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"result"})
	pendingShards = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace:      "kcp_cache",
		Name:           "home_pending_shards",
		Help:           "Shards another cache was claiming when its search reached this one, whose claim this cache has not learnt yet: a consistent read of every shard searches for each.",
		StabilityLevel: metrics.ALPHA,
	})
)

// registerMetrics registers the claims' metrics in the process's registry
// once, when the first Table is built.
func registerMetrics() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(homeInfo, homeConflicts, searches, pendingShards)
	})
}
