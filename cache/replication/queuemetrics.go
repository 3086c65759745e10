package replication

import (
	"k8s.io/client-go/util/workqueue"
	"k8s.io/component-base/metrics"
)

// queueMetrics feeds the work queue's metrics into this package's own
// metrics. The queue is given this provider directly rather than through
// workqueue.SetProvider, a process-wide setting that only its first caller
// wins and that kcp sets for its own queues.
var queueMetrics = newQueueMetricsProvider()

// queueMetricsProvider implements workqueue.MetricsProvider. Its metrics have
// no labels: every controller's queue is named the same, and a gauge that
// several queues Inc and Dec sums them. The two per-queue "unfinished work"
// gauges are set, not summed, so they are not exported.
type queueMetricsProvider struct {
	depth        *metrics.Gauge
	adds         *metrics.Counter
	retries      *metrics.Counter
	latency      *metrics.Histogram
	workDuration *metrics.Histogram
}

var _ workqueue.MetricsProvider = &queueMetricsProvider{}

func newQueueMetricsProvider() *queueMetricsProvider {
	buckets := metrics.ExponentialBuckets(0.0001, 4, 10) // 100µs to ~26s
	return &queueMetricsProvider{
		depth: metrics.NewGauge(&metrics.GaugeOpts{
			Namespace: metricsNamespace, Subsystem: metricsSubsystem, Name: "workqueue_depth",
			Help: "Keys waiting in the replication work queue.", StabilityLevel: metrics.ALPHA,
		}),
		adds: metrics.NewCounter(&metrics.CounterOpts{
			Namespace: metricsNamespace, Subsystem: metricsSubsystem, Name: "workqueue_adds_total",
			Help: "Keys added to the replication work queue.", StabilityLevel: metrics.ALPHA,
		}),
		retries: metrics.NewCounter(&metrics.CounterOpts{
			Namespace: metricsNamespace, Subsystem: metricsSubsystem, Name: "workqueue_retries_total",
			Help: "Keys put back into the replication work queue after a failed reconcile.", StabilityLevel: metrics.ALPHA,
		}),
		latency: metrics.NewHistogram(&metrics.HistogramOpts{
			Namespace: metricsNamespace, Subsystem: metricsSubsystem, Name: "workqueue_queue_duration_seconds",
			Help: "Time a key waits in the replication work queue before a worker takes it.", Buckets: buckets, StabilityLevel: metrics.ALPHA,
		}),
		workDuration: metrics.NewHistogram(&metrics.HistogramOpts{
			Namespace: metricsNamespace, Subsystem: metricsSubsystem, Name: "workqueue_work_duration_seconds",
			Help: "Time one reconcile takes.", Buckets: buckets, StabilityLevel: metrics.ALPHA,
		}),
	}
}

// all returns the metrics to register.
func (p *queueMetricsProvider) all() []metrics.Registerable {
	return []metrics.Registerable{p.depth, p.adds, p.retries, p.latency, p.workDuration}
}

// NewDepthMetric implements workqueue.MetricsProvider.
func (p *queueMetricsProvider) NewDepthMetric(string) workqueue.GaugeMetric { return p.depth }

// NewAddsMetric implements workqueue.MetricsProvider.
func (p *queueMetricsProvider) NewAddsMetric(string) workqueue.CounterMetric { return p.adds }

// NewLatencyMetric implements workqueue.MetricsProvider.
func (p *queueMetricsProvider) NewLatencyMetric(string) workqueue.HistogramMetric {
	return p.latency
}

// NewWorkDurationMetric implements workqueue.MetricsProvider.
func (p *queueMetricsProvider) NewWorkDurationMetric(string) workqueue.HistogramMetric {
	return p.workDuration
}

// NewUnfinishedWorkSecondsMetric implements workqueue.MetricsProvider.
func (p *queueMetricsProvider) NewUnfinishedWorkSecondsMetric(string) workqueue.SettableGaugeMetric {
	return noopGauge{}
}

// NewLongestRunningProcessorSecondsMetric implements workqueue.MetricsProvider.
func (p *queueMetricsProvider) NewLongestRunningProcessorSecondsMetric(string) workqueue.SettableGaugeMetric {
	return noopGauge{}
}

// NewRetriesMetric implements workqueue.MetricsProvider.
func (p *queueMetricsProvider) NewRetriesMetric(string) workqueue.CounterMetric { return p.retries }

// noopGauge discards what it is set to.
type noopGauge struct{}

// Set implements workqueue.SettableGaugeMetric.
func (noopGauge) Set(float64) {}
