package reload

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

var (
	registerOnce sync.Once

	reloads = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      "kcp_cache",
		Name:           "file_reloads_total",
		Help:           "Reloads of a changed credentials file (the token file, a peer's kubeconfig), by source and result; an error is counted once per content that could not be loaded.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"source", "result"})
	reloadFailing = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace:      "kcp_cache",
		Name:           "file_reload_failing",
		Help:           "1 while the latest content of a credentials file could not be loaded and the content loaded before stays in force, 0 otherwise.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"source"})
)

func registerMetrics() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(reloads, reloadFailing)
	})
}
