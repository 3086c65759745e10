package hook

import (
	"context"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/client"
	"github.com/kcp-cache/kcp-cache/cache/replication"
)

const (
	// defaultHeartbeatInterval is how often the shard renews its heartbeat.
	defaultHeartbeatInterval = 5 * time.Second
	// leaseIntervals is how many renewals a heartbeat's lease lasts: a
	// consumer calls it expired after missing this many in a row, so one
	// slow write does not make a live shard look dead.
	leaseIntervals = 4
	// heartbeatFieldManager writes heartbeats by server-side apply.
	heartbeatFieldManager = "kcp-cache-heartbeat"
	// heartbeatFailuresBeforeError is how many failed renewals in a row are
	// logged quietly before each further one is an error: a cache restart
	// costs a few.
	heartbeatFailuresBeforeError = 3
)

var (
	heartbeatsTotal = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      "kcp_cache",
		Subsystem:      "heartbeat",
		Name:           "renewals_total",
		Help:           "Renewals of the shard's heartbeat in the cache, by result: success or error.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"result"})
	heartbeatDuration = metrics.NewHistogram(&metrics.HistogramOpts{
		Namespace:      "kcp_cache",
		Subsystem:      "heartbeat",
		Name:           "renewal_duration_seconds",
		Help:           "Time one successful renewal of the shard's heartbeat took.",
		Buckets:        []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5},
		StabilityLevel: metrics.ALPHA,
	})
	registerHeartbeatMetrics sync.Once
)

// heartbeater renews the shard's heartbeat in its own partition. It runs
// beside the replication controller and never holds it up: it only reads
// the controller's Status, and its writes go out on its own goroutine, each
// bounded by the interval. A failed renewal is logged and retried at the
// next tick; the heartbeat is renewed again as soon as the cache returns.
type heartbeater struct {
	shard    string
	client   dynamic.ResourceInterface
	status   func() replication.Status
	interval time.Duration
	now      func() time.Time

	// loaded is set once the heartbeat in the cache has been read (or found
	// missing) after start; carried is the epoch it recorded. A restarted
	// shard keeps reporting it until its replication converges again: the
	// partition's contents were pushed in that epoch, and a shard restart
	// does not change what the cache holds.
	loaded   bool
	carried  string
	failures int

	// written is what the last successful renewal reported; a renewal is
	// brought forward when the shard converges, converges in a new epoch,
	// or is converged with another number of copies than reported (the
	// copies are counted from the cache's events, which follow the writes),
	// so consumers see a partition confirmed, and its contents, as soon as
	// they are.
	written struct {
		converged bool
		epoch     string
		objects   int64
	}
}

// earlyCheckDivisor and maxEarlyCheck space the checks for a renewal
// brought forward: five per interval, at least one a second; each reads the
// controller's in-memory status only.
const (
	earlyCheckDivisor = 5
	maxEarlyCheck     = time.Second
)

func newHeartbeater(shard string, cc *client.ClusterClient, status func() replication.Status, interval time.Duration) *heartbeater {
	registerHeartbeatMetrics.Do(func() { legacyregistry.MustRegister(heartbeatsTotal, heartbeatDuration) })
	return &heartbeater{
		shard:    shard,
		client:   cc.Cluster(shard, kcpcache.HeartbeatCluster).Resource(kcpcache.HeartbeatResource),
		status:   status,
		interval: interval,
		now:      time.Now,
	}
}

// run renews the heartbeat every interval until ctx is done.
func (h *heartbeater) run(ctx context.Context) {
	logger := klog.FromContext(ctx).WithName("heartbeat")
	ctx = klog.NewContext(ctx, logger)
	ticker := time.NewTicker(h.interval)
	defer ticker.Stop()
	check := time.NewTicker(max(min(h.interval/earlyCheckDivisor, maxEarlyCheck), time.Millisecond))
	defer check.Stop()
	for {
		h.renewAndLog(ctx)
	wait:
		for {
			select {
			case <-ctx.Done():
				return
			case <-ticker.C:
				break wait
			case <-check.C:
				if h.newlyConverged() {
					ticker.Reset(h.interval)
					break wait
				}
			}
		}
	}
}

// newlyConverged reports whether the shard is converged and the last
// successful renewal said otherwise: not converged, another epoch, another
// number of copies.
func (h *heartbeater) newlyConverged() bool {
	st := h.status()
	if !st.Converged {
		return false
	}
	var objects int64
	for _, r := range st.Resources {
		objects += r.Objects
	}
	return !h.written.converged || (st.EpochKnown && st.Epoch != h.written.epoch) || objects != h.written.objects
}

func (h *heartbeater) renewAndLog(ctx context.Context) {
	logger := klog.FromContext(ctx)
	start := time.Now()
	err := h.renew(ctx)
	switch {
	case err == nil:
		heartbeatsTotal.WithLabelValues("success").Inc()
		heartbeatDuration.Observe(time.Since(start).Seconds())
		if h.failures > 0 {
			logger.Info("Heartbeat renewed again", "failedRenewals", h.failures)
		}
		h.failures = 0
	case ctx.Err() != nil:
		// Shutting down.
	default:
		heartbeatsTotal.WithLabelValues("error").Inc()
		h.failures++
		if h.failures <= heartbeatFailuresBeforeError {
			logger.V(2).Info("Renewing the heartbeat failed; retrying", "err", err, "failures", h.failures)
		} else {
			logger.Error(err, "Renewing the heartbeat failed; retrying", "failures", h.failures)
		}
	}
}

// renew writes the heartbeat once, by server-side apply: one request that
// creates it when missing (a new cache) and replaces the spec otherwise.
func (h *heartbeater) renew(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, h.interval)
	defer cancel()
	if !h.loaded {
		existing, err := h.client.Get(ctx, h.shard, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return fmt.Errorf("reading the heartbeat: %w", err)
		default:
			h.carried, _, _ = unstructured.NestedString(existing.Object, "spec", "epoch")
		}
		h.loaded = true
	}
	spec := h.spec()
	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&spec)
	if err != nil {
		return err
	}
	obj := &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": kcpcache.HeartbeatResource.GroupVersion().String(),
		"kind":       kcpcache.HeartbeatKind,
		"metadata":   map[string]interface{}{"name": h.shard},
		"spec":       content,
	}}
	if _, err := h.client.Apply(ctx, h.shard, obj, metav1.ApplyOptions{FieldManager: heartbeatFieldManager, Force: true}); err != nil {
		return fmt.Errorf("writing the heartbeat: %w", err)
	}
	h.written.converged, h.written.epoch, h.written.objects = spec.Converged, spec.Epoch, spec.Objects
	return nil
}

// spec is the heartbeat as of now.
func (h *heartbeater) spec() kcpcache.HeartbeatSpec {
	st := h.status()
	epoch := h.carried
	if st.EpochKnown {
		epoch = st.Epoch
	}
	spec := kcpcache.HeartbeatSpec{
		RenewTime:            metav1.NewMicroTime(h.now()),
		LeaseDurationSeconds: int32(leaseIntervals * h.interval / time.Second),
		Converged:            st.Converged,
		PendingKeys:          int64(st.PendingKeys),
		Epoch:                epoch,
		OriginRegressions:    st.OriginRegressions,
	}
	if spec.LeaseDurationSeconds < 1 {
		spec.LeaseDurationSeconds = 1
	}
	for _, r := range st.Resources {
		spec.Resources = append(spec.Resources, kcpcache.HeartbeatResourceStatus{
			Resource:                    r.GVR.GroupResource().String(),
			Objects:                     r.Objects,
			NewestOriginResourceVersion: r.NewestOriginResourceVersion,
		})
		spec.Objects += r.Objects
	}
	return spec
}

// RunHeartbeat renews the heartbeat of a partition until ctx is done, from
// the status of the replication controller that keeps it, as the hook does
// for the partitions it keeps; interval 0 means 5s. It is for a replicator
// that runs without the hook, such as one beside a stock kcp shard that
// keeps only the shard's user-read partition (examples/replicator).
func RunHeartbeat(ctx context.Context, partition string, cc *client.ClusterClient, status func() replication.Status, interval time.Duration) {
	if interval == 0 {
		interval = defaultHeartbeatInterval
	}
	newHeartbeater(partition, cc, status, interval).run(ctx)
}
