package hook

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2"
)

// Reason says why the cache is degraded. The set is closed so that the
// gauge's label stays bounded.
type Reason string

const (
	// ReasonStarting: the hook has not reached the cache yet.
	ReasonStarting Reason = "Starting"
	// ReasonCacheUnreachable: the cache does not answer, or is not ready.
	ReasonCacheUnreachable Reason = "CacheUnreachable"
	// ReasonInformersNotSynced: the global informers have not listed the
	// cache, or lost their watch.
	ReasonInformersNotSynced Reason = "InformersNotSynced"
	// ReasonReplicationPending: the shard's partition has not converged
	// since start-up.
	ReasonReplicationPending Reason = "ReplicationPending"
)

var allReasons = []Reason{ReasonStarting, ReasonCacheUnreachable, ReasonInformersNotSynced, ReasonReplicationPending}

var (
	degradedGauge = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Name:           "kcp_cache_degraded",
		Help:           "1 for the reason the shard's use of the cache is degraded, 0 for the others; all 0 when healthy.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"reason"})
	registerMetrics sync.Once
)

// Status is the degraded state of the host's use of the cache.
type Status struct {
	mu      sync.Mutex
	reason  Reason // "" when not degraded
	message string
	since   time.Time
}

// NewStatus returns a status that starts degraded with ReasonStarting.
func NewStatus() *Status {
	registerMetrics.Do(func() { legacyregistry.MustRegister(degradedGauge) })
	s := &Status{}
	s.set(context.Background(), ReasonStarting, "the cache replication hook has not run yet")
	return s
}

// Degrade records reason; a change of reason or message is logged once.
func (s *Status) Degrade(ctx context.Context, reason Reason, message string) {
	s.set(ctx, reason, message)
}

// Recover clears the degraded state.
func (s *Status) Recover(ctx context.Context) {
	s.set(ctx, "", "")
}

// Get returns the current reason ("" when healthy), message and since when.
func (s *Status) Get() (Reason, string, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reason, s.message, s.since
}

func (s *Status) set(ctx context.Context, reason Reason, message string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.reason == reason && s.message == message {
		return
	}
	logger := klog.FromContext(ctx)
	switch {
	case reason == "":
		logger.Info("Cache is healthy again", "wasDegradedFor", time.Since(s.since).Round(time.Millisecond), "previousReason", s.reason)
	case s.reason != reason:
		logger.Info("Cache is degraded; the shard keeps serving its own data and catches up when the cache returns", "reason", reason, "message", message)
	}
	s.reason, s.message, s.since = reason, message, time.Now()
	for _, r := range allReasons {
		v := 0.0
		if r == reason {
			v = 1
		}
		degradedGauge.WithLabelValues(string(r)).Set(v)
	}
}

// ServeHTTP answers 200 "ok" when healthy and 503 with the reason when
// degraded, like a /readyz check, so operators and probes can ask for it
// explicitly without it being part of the host's aggregate /readyz.
func (s *Status) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	reason, message, since := s.Get()
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if reason == "" {
		fmt.Fprintln(w, "ok")
		return
	}
	w.WriteHeader(http.StatusServiceUnavailable)
	fmt.Fprintf(w, "degraded: %s: %s (since %s)\n", reason, message, since.UTC().Format(time.RFC3339))
}
