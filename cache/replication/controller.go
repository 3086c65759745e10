package replication

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/client"
)

// queueName names the work queue in its metrics.
const queueName = "kcp_cache_replication"

// defaultProgressInterval spaces the progress lines of the initial sync.
const defaultProgressInterval = 2 * time.Second

// Controller keeps one shard's partition of the cache an exact mirror of the
// shard's selected objects. Make it with NewController and run it once with
// Run.
type Controller struct {
	shard                   string
	replicateSystemClusters bool
	// clusters is Config.Clusters; nil: the system-cluster rule.
	clusters    func(schema.GroupVersionResource, string) bool
	waitFor     []cache.InformerSynced
	cacheClient *client.ClusterClient
	resources   map[schema.GroupVersionResource]*resourceState
	// order lists resources in configuration order, for stable logs.
	order        []schema.GroupVersionResource
	cacheFactory *client.InformerFactory
	queue        workqueue.TypedRateLimitingInterface[Key]
	lag          *lagTracker
	echoes       *echoes
	initial      *convergence
	pending      *pendingKeys
	// regressions counts copies found newer than their origin objects.
	regressions atomic.Int64
	started     atomic.Bool

	progressInterval time.Duration

	// Dependencies, as fields so tests can swap them.

	// now is the clock of lag measurements.
	now func() time.Time
	// getLocal returns the shard's selected object under a key, or nil.
	getLocal func(Key) (*unstructured.Unstructured, error)
	// getCopy returns the cache's copy under a key, or nil.
	getCopy func(Key) (*unstructured.Unstructured, error)
	// createCopy, updateCopy and deleteCopy write to the cache.
	createCopy func(context.Context, Key, *unstructured.Unstructured) error
	updateCopy func(context.Context, Key, *unstructured.Unstructured) error
	deleteCopy func(context.Context, Key, types.UID) error
	// observeLag receives every lag measurement, after the metric.
	observeLag func(schema.GroupVersionResource, time.Duration)
}

// resourceState is one replicated resource and both of its views.
type resourceState struct {
	Resource
	// label is the resource label of the metrics.
	label  string
	source LocalSource
	// cacheInformer is the controller's view of the cache: its own,
	// scoped to the shard, or a host's wildcard informer (hostInformer).
	cacheInformer cache.SharedIndexInformer
	hostInformer  bool
	// copies counts what this controller added to the objects gauge, so it
	// can take it back when it stops.
	copies atomic.Int64
	// newest is the highest origin resourceVersion confirmed in the cache.
	newest newestVersion
}

// NewController validates cfg and returns a controller for it. It asks
// cfg.LocalSources for every resource and prepares (but does not start) the
// cache informers; nothing talks to a server before Run.
func NewController(cfg *Config) (*Controller, error) {
	if cfg == nil {
		return nil, fmt.Errorf("replication: no config")
	}
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("replication: invalid config: %w", err)
	}
	registerMetrics()

	c := &Controller{
		shard:                   cfg.Shard,
		replicateSystemClusters: cfg.ReplicateSystemClusters,
		clusters:                cfg.Clusters,
		waitFor:                 cfg.WaitFor,
		cacheClient:             cfg.CacheClient,
		resources:               map[schema.GroupVersionResource]*resourceState{},
		cacheFactory:            client.NewInformerFactory(cfg.CacheClient, kcpcache.Scope{Shard: cfg.Shard, Cluster: kcpcache.Wildcard}, 0),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(cfg.rateLimiter(), workqueue.TypedRateLimitingQueueConfig[Key]{
			Name:            queueName,
			MetricsProvider: queueMetrics,
		}),
		lag:              newLagTracker(),
		echoes:           newEchoes(),
		initial:          newConvergence(),
		pending:          newPendingKeys(),
		progressInterval: defaultProgressInterval,
		now:              time.Now,
		observeLag:       func(schema.GroupVersionResource, time.Duration) {},
	}
	for _, r := range cfg.resources() {
		source, err := cfg.LocalSources(r.GVR)
		if err != nil {
			return nil, fmt.Errorf("replication: local source of %s: %w", r.GVR, err)
		}
		if source.Informer == nil || source.Get == nil {
			return nil, fmt.Errorf("replication: local source of %s needs an informer and a Get function", r.GVR)
		}
		rs := &resourceState{Resource: r, label: r.GVR.GroupResource().String(), source: source}
		if cfg.CacheInformers != nil {
			rs.cacheInformer = cfg.CacheInformers(r.GVR)
			rs.hostInformer = rs.cacheInformer != nil
		}
		if rs.cacheInformer == nil {
			rs.cacheInformer = c.cacheFactory.ForResource(r.GVR)
		}
		if err := addPartitionIndex(rs.cacheInformer); err != nil {
			return nil, fmt.Errorf("replication: indexing the cache informer of %s: %w", r.GVR, err)
		}
		c.resources[r.GVR] = rs
		c.order = append(c.order, r.GVR)
	}
	c.getLocal = c.getLocalFromSource
	c.getCopy = c.getCopyFromInformer
	c.createCopy = c.createInCache
	c.updateCopy = c.updateInCache
	c.deleteCopy = c.deleteFromCache
	return c, nil
}

// InitialSyncDone is closed once every key found on either side when Run
// started has been reconciled successfully: from then on, the partition has
// caught up with the shard as the informers first listed it, copies of
// objects that vanished while the controller was down included. A key that
// keeps failing keeps it open. Later full convergences (after the cache's
// epoch changed) show in Status.
func (c *Controller) InitialSyncDone() <-chan struct{} { return c.initial.doneCh }

// Run replicates until ctx is done, with workers concurrent reconciles
// (DefaultWorkers when less than one). It runs the controller's cache
// informers, waits until they and the local informers have synced, queues
// every key from both sides, and then keeps both sides in line. It returns
// once its workers have stopped; a controller runs only once.
func (c *Controller) Run(ctx context.Context, workers int) {
	logger := klog.FromContext(ctx).WithName("replication").WithValues("shard", c.shard)
	ctx = klog.NewContext(ctx, logger)
	defer utilruntime.HandleCrashWithContext(ctx)
	if !c.started.CompareAndSwap(false, true) {
		logger.Info("Warning: replication controller has already run; not running it again")
		return
	}
	if workers < 1 {
		workers = DefaultWorkers
	}
	resources := make([]string, 0, len(c.order))
	for _, gvr := range c.order {
		resources = append(resources, resourceArg(gvr))
	}
	logger.Info("Starting replication", "resources", resources, "workers", workers)

	defer c.releaseObjectsGauge()
	defer c.cacheFactory.Shutdown()
	registrations, err := c.addHandlers(ctx)
	defer c.removeHandlers(ctx, registrations)
	if err != nil {
		utilruntime.HandleErrorWithContext(ctx, err, "Cannot watch the replicated resources")
		c.queue.ShutDown()
		return
	}
	c.cacheFactory.Start(ctx)

	synced := make([]cache.InformerSynced, 0, 2*len(c.order)+len(c.waitFor))
	synced = append(synced, c.waitFor...)
	for _, gvr := range c.order {
		rs := c.resources[gvr]
		synced = append(synced, rs.source.Informer.HasSynced, rs.cacheInformer.HasSynced)
	}
	if !cache.WaitForNamedCacheSyncWithContext(ctx, synced...) {
		c.queue.ShutDown()
		return
	}
	epoch, agreed := c.listEpoch()
	if !agreed {
		// The informers listed across an epoch change; watchEpoch starts a
		// round in the new epoch once they agree.
		epoch = mixedEpochs
	}
	c.enqueueAll(ctx, epoch)

	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for c.processNextItem(ctx) {
			}
		})
	}
	wg.Go(func() { c.logProgress(ctx) })
	wg.Go(func() { c.watchEpoch(ctx) })

	<-ctx.Done()
	logger.Info("Stopping replication")
	c.queue.ShutDown()
	wg.Wait()
}

// mixedEpochs is the round epoch when the cache informers listed in
// different epochs; no cache announces it, so the round never counts as
// converged in the current epoch.
const mixedEpochs = "(mixed)"

// enqueue queues k and counts it as pending until a reconcile succeeds.
func (c *Controller) enqueue(k Key) {
	c.pending.add(k)
	c.queue.Add(k)
}

// clusterSelected is false for logical clusters whose objects of gvr stay
// on the shard.
func (c *Controller) clusterSelected(gvr schema.GroupVersionResource, cluster string) bool {
	if c.clusters != nil {
		return c.clusters(gvr, cluster)
	}
	return c.replicateSystemClusters || !strings.HasPrefix(cluster, "system:")
}

// ResyncCluster queues every key of cluster found on either side, for every
// resource: call it when Config.Clusters changes its answer for cluster, so
// that the cluster's selected objects get copies and the others lose
// theirs. It reads the informers' stores, so it finds nothing before they
// have synced; Run's first round covers every key anyway. It is safe for
// concurrent use, and does nothing once the controller has stopped.
func (c *Controller) ResyncCluster(cluster string) {
	if c.queue.ShuttingDown() {
		return
	}
	for _, gvr := range c.order {
		rs := c.resources[gvr]
		for _, obj := range rs.source.Informer.GetStore().List() {
			if k, err := keyFor(gvr, obj); err == nil && k.Cluster == cluster {
				c.enqueue(k)
			}
		}
		for _, obj := range rs.cacheInformer.GetStore().List() {
			if !inShard(obj, c.shard) {
				continue
			}
			if k, err := keyFor(gvr, obj); err == nil && k.Cluster == cluster {
				c.enqueue(k)
			}
		}
	}
}

// releaseObjectsGauge takes this controller's copies out of the objects
// gauge; it runs after the cache informers, and their handlers, have stopped.
func (c *Controller) releaseObjectsGauge() {
	for _, rs := range c.resources {
		objectsGauge.WithLabelValues(rs.label).Add(-float64(rs.copies.Swap(0)))
	}
}
