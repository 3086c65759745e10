package hook

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/client"
	"github.com/kcp-cache/kcp-cache/cache/replication"
)

const (
	// Name is the post-start hook's name, as kcp calls its own.
	Name = "kcp-start-cache-replication"

	// StatusPath is where the degraded state is served: a /readyz-style
	// check that is not part of the aggregate /readyz.
	StatusPath = "/readyz/cache-replication"

	defaultProbeInterval = 2 * time.Second

	// defaultCacheQPS and defaultCacheBurst bound the shard's requests to
	// the cache when its configuration sets no limit.
	defaultCacheQPS   = 500
	defaultCacheBurst = 1000
)

// Config is what the hook needs from its host.
type Config struct {
	// Shard is the host's shard name: its partition in the cache.
	Shard string
	// CacheConfig reaches the cache server (its root; the /services/cache
	// prefix is added per request).
	CacheConfig *rest.Config
	// LocalSources gives the replication controller the shard's own objects.
	LocalSources replication.SourceProvider
	// KcpRelease is the host's kcp release line, which selects the default
	// Resources and GlobalResources; empty means kcpcache.DefaultKcpRelease.
	KcpRelease kcpcache.KcpRelease
	// Resources are the replicated types; nil means those of the release
	// line (replication.DefaultResourcesOf).
	Resources []replication.Resource
	// GlobalResources are the types the global informers watch in every
	// shard and cluster; nil means every type of the release line's kcp
	// profile, as kcp's own global informers do, and every replicated type.
	GlobalResources []schema.GroupVersionResource
	// CacheInformers, when set, returns the host's own wildcard informers
	// over the cache (kcp runs one per type): the hook then opens no watch
	// of its own for such a type, neither for its global view nor for
	// replication (see replication.Config.CacheInformers). A nil result
	// means the hook's own. The host starts them.
	CacheInformers func(schema.GroupVersionResource) cache.SharedIndexInformer
	// Workers is the replication controller's concurrency; 0 means its default.
	Workers int
	// ProbeInterval is how often the cache's health is checked; 0 means 2s.
	ProbeInterval time.Duration
	// HeartbeatInterval is how often the shard renews its heartbeat in the
	// cache; 0 means 5s. The heartbeat's lease lasts four intervals.
	HeartbeatInterval time.Duration

	// UserRead, when it marks anything, also keeps the shard's user-read
	// partition (kcpcache.UserReadPartition): what users read in the marked
	// workspaces, pushed by a second replication controller
	// (replication.UserReadController) with its own heartbeat in that
	// partition. LocalSources must then provide UserReadTypes and
	// LogicalClusters too.
	UserRead replication.Marking
	// UserReadTypes are pushed for the marked workspaces; nil means
	// kcpcache.UserReadTypes().
	UserReadTypes []kcpcache.Type
}

// Hook replicates a shard into the cache and keeps global informers over it.
type Hook struct {
	cfg       Config
	status    *Status
	cacheREST *rest.Config
	// probeClient asks the cache's /readyz; built once, reused every probe.
	probeClient *http.Client
	global      *client.InformerFactory
	globalGVRs  []schema.GroupVersionResource
	controller  *replication.Controller
	heartbeater *heartbeater
	heartbeats  *client.Heartbeats
	// userRead and userReadHeartbeater keep the user-read partition; nil
	// when nothing is marked.
	userRead            *replication.UserReadController
	userReadHeartbeater *heartbeater

	// mu guards the run Start began: its cancel and the goroutine's end.
	mu      sync.Mutex
	stopped bool
	cancel  context.CancelFunc
	running sync.WaitGroup
}

// New builds the clients, the global informers and the replication
// controller. It contacts nothing; failures to reach the cache show up later
// as a degraded status.
func New(cfg Config) (*Hook, error) {
	if cfg.CacheConfig == nil {
		return nil, fmt.Errorf("no cache configuration")
	}
	if cfg.KcpRelease == "" {
		cfg.KcpRelease = kcpcache.DefaultKcpRelease
	}
	types, err := kcpcache.KcpTypesOf(cfg.KcpRelease)
	if err != nil {
		return nil, err
	}
	if cfg.Resources == nil {
		cfg.Resources = replication.ResourcesFor(types)
	}
	if cfg.GlobalResources == nil {
		cfg.GlobalResources = defaultGlobalResources(types, cfg.Resources)
	}
	if cfg.ProbeInterval == 0 {
		cfg.ProbeInterval = defaultProbeInterval
	}
	if cfg.HeartbeatInterval == 0 {
		cfg.HeartbeatInterval = defaultHeartbeatInterval
	}
	cacheConfig := rest.CopyConfig(cfg.CacheConfig)
	if cacheConfig.QPS == 0 && cacheConfig.RateLimiter == nil {
		// client-go's default of 5 requests/s would make the first sync of
		// 10,000 objects take over half an hour.
		cacheConfig.QPS, cacheConfig.Burst = defaultCacheQPS, defaultCacheBurst
	}
	cacheClient, err := client.NewForConfig(cacheConfig)
	if err != nil {
		return nil, fmt.Errorf("cache client: %w", err)
	}
	controller, err := replication.NewController(&replication.Config{
		Shard:          cfg.Shard,
		CacheClient:    cacheClient,
		LocalSources:   cfg.LocalSources,
		Resources:      cfg.Resources,
		CacheInformers: cfg.CacheInformers,
	})
	if err != nil {
		return nil, err
	}
	probeClient, err := rest.HTTPClientFor(cacheConfig)
	if err != nil {
		return nil, fmt.Errorf("cache HTTP client: %w", err)
	}
	h := &Hook{
		probeClient: probeClient,
		cfg:         cfg,
		status:      NewStatus(),
		cacheREST:   cacheConfig,
		global:      client.NewInformerFactory(cacheClient, kcpcache.Scope{Shard: kcpcache.Wildcard, Cluster: kcpcache.Wildcard}, 0),
		globalGVRs:  cfg.GlobalResources,
		controller:  controller,
		heartbeater: newHeartbeater(cfg.Shard, cacheClient, controller.Status, cfg.HeartbeatInterval),
		heartbeats:  client.NewHeartbeats(cacheClient),
	}
	for _, gvr := range h.globalGVRs {
		if h.hostInformer(gvr) == nil {
			h.global.ForResource(gvr) // create now, so Start runs it
		}
	}
	if !cfg.UserRead.Empty() {
		if h.userRead, err = replication.NewUserReadController(&replication.UserReadConfig{
			Shard:          cfg.Shard,
			CacheClient:    cacheClient,
			LocalSources:   cfg.LocalSources,
			Marking:        cfg.UserRead,
			Types:          cfg.UserReadTypes,
			CacheInformers: cfg.CacheInformers,
		}); err != nil {
			return nil, err
		}
		h.userReadHeartbeater = newHeartbeater(kcpcache.UserReadPartition(cfg.Shard), cacheClient, h.userRead.Controller().Status, cfg.HeartbeatInterval)
	}
	return h, nil
}

// UserRead is the controller of the shard's user-read partition; nil when
// Config.UserRead marks nothing.
func (h *Hook) UserRead() *replication.UserReadController { return h.userRead }

// GlobalInformers are informers over every shard and cluster of the cache,
// for the host's controllers' cache-fallback lookups; types the host's own
// informers cover (Config.CacheInformers) are not in it.
func (h *Hook) GlobalInformers() *client.InformerFactory { return h.global }

// Heartbeats tells how fresh every shard's partition is, from the shards'
// heartbeats, for the same lookups as GlobalInformers (see
// client.FreshLookup). It runs with the hook.
func (h *Hook) Heartbeats() *client.Heartbeats { return h.heartbeats }

// Status is the degraded state; it is also served at StatusPath.
func (h *Hook) Status() *Status { return h.status }

// Controller is the replication controller the hook runs.
func (h *Hook) Controller() *replication.Controller { return h.controller }

// Install wires the hook into a host server as kcp wires its own
// replication: a post-start hook starts it, a pre-shutdown hook stops it
// (the host still serves then, so replication's last requests through the
// host's listener are answered), and the degraded status is served at
// StatusPath.
func (h *Hook) Install(s *genericapiserver.GenericAPIServer) error {
	if err := s.AddPostStartHook(Name, h.PostStartHook); err != nil {
		return err
	}
	if err := s.AddPreShutdownHook(Name, func() error {
		h.Stop()
		return nil
	}); err != nil {
		return err
	}
	// Registered as a plain path, not through AddReadyzChecks: a cache
	// outage must not take the host out of its load balancer.
	s.Handler.NonGoRestfulMux.Handle(StatusPath, h.status)
	return nil
}

// PostStartHook starts everything in the background and returns at once:
// the host's readiness never waits for the cache.
func (h *Hook) PostStartHook(hookCtx genericapiserver.PostStartHookContext) error {
	ctx := klog.NewContext(hookCtx, klog.FromContext(hookCtx).WithName("cache-hook").WithValues("shard", h.cfg.Shard))
	h.Start(ctx)
	return nil
}

// Start runs Run in a goroutine the hook owns, until ctx is done or Stop is
// called. It does nothing after Stop, or when already started.
func (h *Hook) Start(ctx context.Context) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopped || h.cancel != nil {
		return
	}
	ctx, h.cancel = context.WithCancel(ctx)
	h.running.Go(func() { h.Run(ctx) })
}

// Stop ends what Start started and returns once all of it has returned:
// replication, the heartbeat, the informers and the probe. It is safe to
// call more than once, and before or without Start.
func (h *Hook) Stop() {
	h.mu.Lock()
	h.stopped = true
	cancel := h.cancel
	h.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	h.running.Wait()
}

// Run runs the global informers, the heartbeat watcher, the replication
// controller, the shard's own heartbeat and the health probe until ctx is
// done, and returns once every one of them has. The informers and the
// controller retry with backoff on their own while the cache is away; the
// heartbeat is renewed again when it returns.
func (h *Hook) Run(ctx context.Context) {
	defer utilruntime.HandleCrashWithContext(ctx)
	h.global.Start(ctx)
	defer h.global.Shutdown()
	h.heartbeats.Start(ctx)
	defer h.heartbeats.Shutdown()
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { h.heartbeater.run(ctx) })
	wg.Go(func() { h.controller.Run(ctx, h.cfg.Workers) })
	if h.userRead != nil {
		wg.Go(func() {
			ctx := klog.NewContext(ctx, klog.FromContext(ctx).WithValues("partition", kcpcache.UserReadPartition(h.cfg.Shard)))
			h.userReadHeartbeater.run(ctx)
		})
		wg.Go(func() { h.userRead.Run(ctx, h.cfg.Workers) })
	}

	ticker := time.NewTicker(h.cfg.ProbeInterval)
	defer ticker.Stop()
	for {
		h.probe(ctx)
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// probe sets the status from the cache's readiness and the informers' state.
func (h *Hook) probe(ctx context.Context) {
	if err := h.cacheReady(ctx); err != nil {
		h.status.Degrade(ctx, ReasonCacheUnreachable, err.Error())
		return
	}
	for _, gvr := range h.globalGVRs {
		if host := h.hostInformer(gvr); host != nil {
			if !host.HasSynced() {
				h.status.Degrade(ctx, ReasonInformersNotSynced, fmt.Sprintf("the host's cache informer for %s is not synced", gvr.GroupResource()))
				return
			}
			continue
		}
		inf := h.global.ForResource(gvr)
		if _, watching := inf.Freshness(); !inf.HasSynced() || !watching {
			h.status.Degrade(ctx, ReasonInformersNotSynced, fmt.Sprintf("the global informer for %s is not synced and watching", gvr.GroupResource()))
			return
		}
	}
	select {
	case <-h.controller.InitialSyncDone():
	default:
		h.status.Degrade(ctx, ReasonReplicationPending, "the shard's partition has not converged since start-up")
		return
	}
	if h.userRead != nil {
		select {
		case <-h.userRead.Controller().InitialSyncDone():
		default:
			h.status.Degrade(ctx, ReasonReplicationPending, "the shard's user-read partition has not converged since start-up")
			return
		}
	}
	h.status.Recover(ctx)
}

// cacheReady asks the cache's /readyz.
func (h *Hook) cacheReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, kcpcache.JoinHostPath(h.cacheREST.Host, kcpcache.ServicePrefix+"/readyz"), nil)
	if err != nil {
		return err
	}
	resp, err := h.probeClient.Do(req)
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("cache /readyz answered %s", resp.Status)
	}
	return nil
}

// hostInformer returns the host's cache informer for gvr, if it has one.
func (h *Hook) hostInformer(gvr schema.GroupVersionResource) cache.SharedIndexInformer {
	if h.cfg.CacheInformers == nil {
		return nil
	}
	return h.cfg.CacheInformers(gvr)
}

// defaultGlobalResources is a release line's kcp types followed by the
// replicated ones they lack.
func defaultGlobalResources(types []kcpcache.Type, replicated []replication.Resource) []schema.GroupVersionResource {
	var gvrs []schema.GroupVersionResource
	seen := map[schema.GroupVersionResource]bool{}
	for _, t := range types {
		gvrs = append(gvrs, t.GVR())
		seen[t.GVR()] = true
	}
	for _, r := range replicated {
		if !seen[r.GVR] {
			gvrs = append(gvrs, r.GVR)
			seen[r.GVR] = true
		}
	}
	return gvrs
}
