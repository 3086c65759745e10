package epoch

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

var (
	epochInfo = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace: "kcp_cache", Name: "epoch_info",
		Help:           "1 for the cache's current epoch (see the Kcp-Cache-Epoch response header).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"epoch"})
	registerOnce sync.Once
)

// announce makes epoch the one kcp_cache_epoch_info reports. The registry
// is the process's: with several servers in one process (a test, a host
// and its mounted cache) it reports the one that resolved its epoch last.
func announce(epoch string) {
	registerOnce.Do(func() { legacyregistry.MustRegister(epochInfo) })
	epochInfo.Reset()
	epochInfo.WithLabelValues(epoch).Set(1)
}
