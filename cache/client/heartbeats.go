package client

import (
	"context"
	"sort"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/clock"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

// Heartbeats watches every shard's heartbeat (kcpcache.HeartbeatResource in
// each partition's kcpcache.HeartbeatCluster) and answers how fresh each
// shard's partition is. Reading heartbeats needs a shard identity or the
// readers group (or system:masters). Make it with NewHeartbeats, Start it,
// and ask Shard or Shards.
type Heartbeats struct {
	factory  *InformerFactory
	informer *Informer
	epochs   *Epochs
	clock    clock.PassiveClock
}

// NewHeartbeats returns a heartbeat watcher over c. It contacts nothing
// until Start.
func NewHeartbeats(c *ClusterClient) *Heartbeats {
	f := NewInformerFactory(c, kcpcache.Scope{Shard: kcpcache.Wildcard, Cluster: kcpcache.HeartbeatCluster}, 0)
	return &Heartbeats{factory: f, informer: f.ForResource(kcpcache.HeartbeatResource), epochs: c.epochs, clock: clock.RealClock{}}
}

// Start runs the heartbeat informer until ctx is done or Shutdown.
func (h *Heartbeats) Start(ctx context.Context) { h.factory.Start(ctx) }

// WaitForCacheSync waits until the heartbeats are listed or ctx is done.
func (h *Heartbeats) WaitForCacheSync(ctx context.Context) bool {
	return h.factory.WaitForCacheSync(ctx)[kcpcache.HeartbeatResource]
}

// Shutdown stops the informer and waits for it.
func (h *Heartbeats) Shutdown() { h.factory.Shutdown() }

// Informer is the heartbeat informer, for event handlers.
func (h *Heartbeats) Informer() *Informer { return h.informer }

// PartitionFreshness is how current one shard's partition of the cache is,
// as its last heartbeat tells.
type PartitionFreshness struct {
	// Shard names the partition.
	Shard string
	// Known is false when the shard has no heartbeat (not yet, or it runs
	// no hook that writes one, as a plain kcp shard): nothing is known about
	// the partition's freshness, and every other field is zero but Age.
	Known bool
	// RenewTime is the last heartbeat, on the shard's clock.
	RenewTime time.Time
	// LeaseDuration is how long after RenewTime the shard promised to renew.
	LeaseDuration time.Duration
	// Age is how long ago RenewTime was, on this process's clock (clocks of
	// shards and consumers are assumed synchronized, as for Leases); the
	// largest duration when the heartbeat is unknown.
	Age time.Duration
	// Converged is whether the shard's replication had caught up at
	// RenewTime, and PendingKeys how many changes it still had to push.
	Converged   bool
	PendingKeys int64
	// Epoch is the cache epoch the shard last converged its partition in;
	// CacheEpoch is the epoch the cache announces now (as this client last
	// saw it). See Confirmed.
	Epoch      string
	CacheEpoch string
	// Objects counts the copies in the partition, all types together.
	Objects int64
	// OriginRegressions counts objects the shard found older than their
	// copies (the shard went back in time), since its hook started.
	OriginRegressions int64
	// Resources are the shard's replicated types, with their object counts
	// and the newest origin resourceVersion confirmed in the partition.
	Resources []kcpcache.HeartbeatResourceStatus
	// Home is the cache the shard pushes to, when the answering cache
	// mirrors the partition from it (kcpcache.AnnotationHome); empty when
	// the answering cache is the home. HomeEpoch is the home's epoch when
	// the mirror copied the heartbeat: Epoch is compared with it, since
	// the shard converged at the home, not here.
	Home      string
	HomeEpoch string
}

// Confirmed is true when the shard has converged its partition in the
// cache's current epoch. After an epoch change (a new or restored etcd
// behind the cache) a partition stays unconfirmed until its shard has
// pushed it in full again: until then it may miss objects or hold older
// versions of them.
//
// At a mirror (Home set) the heartbeat is the home's: the partition is
// confirmed when the shard converged in the home's epoch that the copy
// came from. (The mirror's own freshness against the home is what its
// consistent reads check.)
func (f PartitionFreshness) Confirmed() bool {
	if f.Home != "" {
		return f.Known && f.Epoch == f.HomeEpoch
	}
	return f.Known && f.Epoch == f.CacheEpoch
}

// Expired is true when the shard has not renewed its heartbeat within its
// lease duration (or has none): the shard, or its way to the cache, is
// down, and its partition holds what it last pushed.
func (f PartitionFreshness) Expired() bool { return !f.Known || f.Age > f.LeaseDuration }

// Shard returns the freshness of shard's partition.
func (h *Heartbeats) Shard(shard string) PartitionFreshness {
	obj, exists, err := h.informer.GetIndexer().GetByKey(ToKey(shard, kcpcache.HeartbeatCluster, "", shard))
	if err != nil || !exists {
		return h.unknown(shard)
	}
	return h.freshnessOf(shard, obj)
}

// Shards returns the freshness of every shard with a heartbeat, by name.
func (h *Heartbeats) Shards() []PartitionFreshness {
	var out []PartitionFreshness
	for _, obj := range h.informer.GetIndexer().List() {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok || u.GetName() != u.GetAnnotations()[kcpcache.AnnotationShard] {
			// Only the object named after its shard is that shard's heartbeat.
			continue
		}
		out = append(out, h.freshnessOf(u.GetName(), u))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Shard < out[j].Shard })
	return out
}

func (h *Heartbeats) unknown(shard string) PartitionFreshness {
	epoch, _ := h.epochs.Current()
	return PartitionFreshness{Shard: shard, Age: time.Duration(1<<63 - 1), CacheEpoch: epoch}
}

// freshnessOf decodes one heartbeat; one that cannot be decoded counts as
// unknown rather than as fresh.
func (h *Heartbeats) freshnessOf(shard string, obj interface{}) PartitionFreshness {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return h.unknown(shard)
	}
	var hb kcpcache.Heartbeat
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &hb); err != nil || hb.Spec.RenewTime.IsZero() {
		return h.unknown(shard)
	}
	f := h.unknown(shard)
	f.Known = true
	f.RenewTime = hb.Spec.RenewTime.Time
	f.LeaseDuration = time.Duration(hb.Spec.LeaseDurationSeconds) * time.Second
	f.Age = h.clock.Since(f.RenewTime)
	f.Converged = hb.Spec.Converged
	f.PendingKeys = hb.Spec.PendingKeys
	f.Epoch = hb.Spec.Epoch
	f.Objects = hb.Spec.Objects
	f.OriginRegressions = hb.Spec.OriginRegressions
	f.Resources = hb.Spec.Resources
	f.Home = u.GetAnnotations()[kcpcache.AnnotationHome]
	f.HomeEpoch = u.GetAnnotations()[kcpcache.AnnotationHomeEpoch]
	return f
}
