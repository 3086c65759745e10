package shardmetrics

import (
	"context"
	"sync"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/client"
)

// Per-shard gauges, from each shard's heartbeat (kcpcache.HeartbeatSpec): label
// cardinality is the number of shards (times replicated types for objects),
// fixed by the installation. A shard whose heartbeat is deleted loses its
// series.
var (
	shardHeartbeatGauge = shardGauge("heartbeat_timestamp_seconds",
		"When the shard last renewed its heartbeat (its clock, Unix seconds); time() minus this is the age of its partition.")
	shardLeaseGauge = shardGauge("heartbeat_lease_seconds",
		"How long after its renewal the shard's heartbeat is current; an age beyond it means the heartbeat has expired.")
	shardConvergedGauge = shardGauge("converged",
		"1 when the shard's replication had caught up at its last heartbeat, else 0.")
	shardConfirmedGauge = shardGauge("confirmed",
		"1 when the shard has pushed its partition in full in the cache's current epoch (for a partition mirrored from its home: in the home's epoch of the copy), 0 while it is unconfirmed.")
	shardPendingGauge = shardGauge("pending_keys",
		"Changes the shard had not yet replicated at its last heartbeat.")
	shardRegressionsGauge = shardGauge("origin_regressions",
		"Objects the shard found older than their copies (the shard went back in time) since its hook started.")
	shardObjectsGauge = shardGauge("objects",
		"Objects in the shard's partition by replicated resource, as the shard's last heartbeat reported them.", "resource")
	registerShardMetrics sync.Once
)

// shardGauge is a per-shard gauge kcp_cache_shard_<name>, labelled by shard
// and extra labels.
func shardGauge(name, help string, extraLabels ...string) *metrics.GaugeVec {
	return metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace: "kcp_cache", Subsystem: "shard", Name: name, Help: help, StabilityLevel: metrics.ALPHA,
	}, append([]string{"shard"}, extraLabels...))
}

// shardMetrics keeps the per-shard gauges in line with the heartbeats.
type shardMetrics struct {
	epoch func() string
	mu    sync.Mutex
	// resources remembers each shard's resource labels, to delete them.
	resources map[string][]string
}

// Watcher keeps the per-shard gauges in line with the shards' heartbeats.
type Watcher struct {
	informer cache.SharedIndexInformer
}

// NewWatcher watches every shard's heartbeat through the loopback client
// (system:masters); Run starts it. client-go's own informer is enough here:
// heartbeats are named after their shards, so namespace/name keys do not
// collide across partitions, and its reflector falls back from streaming
// lists to LIST+WATCH, which the wildcard scope needs, by itself. epoch
// tells the cache's current epoch, against which a shard counts as
// confirmed.
func NewWatcher(loopback *rest.Config, epoch func() string) (*Watcher, error) {
	registerShardMetrics.Do(func() {
		legacyregistry.MustRegister(shardHeartbeatGauge, shardLeaseGauge, shardConvergedGauge, shardConfirmedGauge, shardPendingGauge, shardRegressionsGauge, shardObjectsGauge)
	})
	cfg, err := client.ScopedConfig(loopback, kcpcache.Wildcard, kcpcache.HeartbeatCluster)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	informer := dynamicinformer.NewFilteredDynamicInformer(dyn, kcpcache.HeartbeatResource, "", 0, cache.Indexers{}, nil).Informer()
	m := &shardMetrics{epoch: epoch, resources: map[string][]string{}}
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    m.set,
		UpdateFunc: func(_, obj interface{}) { m.set(obj) },
		DeleteFunc: m.delete,
	}); err != nil {
		return nil, err
	}
	return &Watcher{informer: informer}, nil
}

// Run watches until ctx is done.
func (w *Watcher) Run(ctx context.Context) {
	klog.FromContext(ctx).WithName("shard-metrics").V(2).Info("Watching shard heartbeats for the per-shard metrics")
	w.informer.RunWithContext(ctx)
}

func (m *shardMetrics) set(obj interface{}) {
	shard, ok := heartbeatShard(obj)
	if !ok {
		return
	}
	var hb kcpcache.Heartbeat
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.(*unstructured.Unstructured).Object, &hb); err != nil {
		return
	}
	spec := hb.Spec
	shardHeartbeatGauge.WithLabelValues(shard).Set(float64(spec.RenewTime.UnixMicro()) / 1e6)
	shardLeaseGauge.WithLabelValues(shard).Set(float64(spec.LeaseDurationSeconds))
	shardConvergedGauge.WithLabelValues(shard).Set(boolGauge(spec.Converged))
	shardConfirmedGauge.WithLabelValues(shard).Set(boolGauge(spec.Epoch == confirmingEpoch(obj.(*unstructured.Unstructured), m.epoch)))
	shardPendingGauge.WithLabelValues(shard).Set(float64(spec.PendingKeys))
	shardRegressionsGauge.WithLabelValues(shard).Set(float64(spec.OriginRegressions))
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range m.resources[shard] {
		shardObjectsGauge.DeleteLabelValues(shard, r)
	}
	var resources []string
	for _, r := range spec.Resources {
		shardObjectsGauge.WithLabelValues(shard, r.Resource).Set(float64(r.Objects))
		resources = append(resources, r.Resource)
	}
	m.resources[shard] = resources
}
func (m *shardMetrics) delete(obj interface{}) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	shard, ok := heartbeatShard(obj)
	if !ok {
		return
	}
	for _, g := range []*metrics.GaugeVec{shardHeartbeatGauge, shardLeaseGauge, shardConvergedGauge, shardConfirmedGauge, shardPendingGauge, shardRegressionsGauge} {
		g.DeleteLabelValues(shard)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range m.resources[shard] {
		shardObjectsGauge.DeleteLabelValues(shard, r)
	}
	delete(m.resources, shard)
}

// heartbeatShard returns the shard of a heartbeat: only the object named
// after its partition's shard is one.
func heartbeatShard(obj interface{}) (string, bool) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return "", false
	}
	shard := u.GetAnnotations()[kcpcache.AnnotationShard]
	return shard, shard != "" && shard == u.GetName()
}

// confirmingEpoch is the epoch a shard's heartbeat must name for its
// partition to be confirmed: this cache's, or for a heartbeat mirrored from
// the shard's home (kcpcache.AnnotationHome), the home's epoch it was copied
// in, since the shard converged at the home.
func confirmingEpoch(u *unstructured.Unstructured, epoch func() string) string {
	if a := u.GetAnnotations(); a[kcpcache.AnnotationHome] != "" {
		return a[kcpcache.AnnotationHomeEpoch]
	}
	return epoch()
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
