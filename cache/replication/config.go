package replication

import (
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/client"
)

const (
	// DefaultWorkers is how many keys are reconciled at once unless Run is
	// told otherwise; kcp runs its replication controller with two.
	DefaultWorkers = 2

	// defaultBaseDelay and defaultMaxDelay bound the per-key retry backoff.
	// The cap is far below client-go's default 1000s: after a cache outage
	// every failed key waits up to the cap before its next attempt, and the
	// partition should converge within seconds of the cache coming back.
	defaultBaseDelay = 5 * time.Millisecond
	defaultMaxDelay  = 10 * time.Second
)

// Resource is one replicated type.
type Resource struct {
	// GVR names the resource on the shard and in the cache; both serve it
	// under the same group, version and resource.
	GVR schema.GroupVersionResource

	// Kind is written into copies of typed local objects that lack one; it
	// may stay empty when the LocalSource hands out unstructured objects.
	Kind string

	// Filter selects the local objects to replicate; nil selects all. A local
	// object it rejects is treated as absent, so its copy, if any, is deleted.
	// It must not modify the object.
	Filter func(obj *unstructured.Unstructured) bool
}

// DefaultResources returns what a shard of the default kcp release line
// (kcpcache.DefaultKcpRelease) replicates; see DefaultResourcesOf.
func DefaultResources() []Resource {
	r, err := DefaultResourcesOf(kcpcache.DefaultKcpRelease)
	if err != nil {
		panic(err) // the default line is always known
	}
	return r
}

// DefaultResourcesOf returns what a kcp shard of release replicates: the
// types of its line in the kcp profile (kcpcache.KcpTypesOf) that kcp
// pushes, under the version kcp uses, with kcp's filters. Lines differ:
// kcp main pushes clustercachedresources where v0.32 pushes
// cachedresources, and a shard that lacks a type cannot replicate it.
func DefaultResourcesOf(release kcpcache.KcpRelease) ([]Resource, error) {
	types, err := kcpcache.KcpTypesOf(release)
	if err != nil {
		return nil, err
	}
	return ResourcesFor(types), nil
}

// ResourcesFor returns the replicated resources of types: those whose
// policy pushes anything, annotated-only ones with a filter that selects
// objects carrying kcpcache.AnnotationReplicate.
func ResourcesFor(types []kcpcache.Type) []Resource {
	var out []Resource
	for _, t := range types {
		r := Resource{GVR: t.GVR(), Kind: t.Kind}
		switch t.Replicate {
		case kcpcache.ReplicateNone:
			continue
		case kcpcache.ReplicateAnnotated:
			r.Filter = markedForReplication
		}
		out = append(out, r)
	}
	return out
}

// markedForReplication selects objects kcp marks for the cache.
func markedForReplication(obj *unstructured.Unstructured) bool {
	return obj.GetAnnotations()[kcpcache.AnnotationReplicate] != ""
}

// Config is everything a Controller needs. Fill it directly, or from
// Options.ApplyTo, and pass it to NewController.
type Config struct {
	// Shard is the shard the controller runs in; its copies live in the
	// cache partition shards/{Shard}/clusters/*.
	Shard string

	// CacheClient reaches the cache server. Its rate limiter bounds the
	// controller's requests; give it room for bursts of Workers concurrent
	// writes (a QPS well above the client-go default of 5).
	CacheClient *client.ClusterClient

	// LocalSources provides the shard's own view of each resource.
	LocalSources SourceProvider

	// CacheInformers, when set, returns wildcard informers over the cache
	// (every shard, every cluster) that the host already runs, such as
	// kcp's global informers; the controller reads its partition from them
	// instead of opening a watch of its own per type, and adds an index to
	// them. A nil result for a type means the controller's own. The host
	// starts them; their objects carry kcp.io/shard and kcp.io/cluster, as
	// every cached object does.
	CacheInformers func(schema.GroupVersionResource) cache.SharedIndexInformer

	// Resources lists the replicated types; nil means DefaultResources().
	Resources []Resource

	// ReplicateSystemClusters makes objects in logical clusters named
	// "system:*" replicated too. kcp keeps them to the shard, so by default
	// they have no copies, and copies found for them are deleted.
	ReplicateSystemClusters bool

	// Clusters, when set, decides which logical clusters' objects of a
	// resource are replicated, in place of the system-cluster rule
	// (ReplicateSystemClusters is then ignored); a copy in a cluster it
	// rejects is deleted. It is asked on every event and reconcile, from
	// several goroutines, so it must be cheap and safe for concurrent use.
	// When its answer for a cluster changes, call Controller.ResyncCluster:
	// nothing else makes the controller look at that cluster's objects
	// again.
	Clusters func(gvr schema.GroupVersionResource, cluster string) bool

	// WaitFor are informers Clusters or the filters read: Run waits until
	// they have synced, as it waits for its own, before the first round,
	// so that no copy is deleted because the selection had not seen its
	// cluster yet.
	WaitFor []cache.InformerSynced

	// RateLimiter spaces out retries of failed keys; nil means per-key
	// exponential backoff from 5ms to 10s. No key is ever dropped.
	RateLimiter workqueue.TypedRateLimiter[Key]
}

// validate reports what makes cfg unusable, all at once.
func (cfg *Config) validate() error {
	var errs []error
	if err := kcpcache.ValidateShardName(cfg.Shard); err != nil {
		errs = append(errs, fmt.Errorf("shard: %w", err))
	}
	if cfg.CacheClient == nil {
		errs = append(errs, errors.New("a cache client is required"))
	}
	if cfg.LocalSources == nil {
		errs = append(errs, errors.New("local sources are required"))
	}
	seen := map[schema.GroupVersionResource]bool{}
	for _, r := range cfg.resources() {
		switch {
		case r.GVR.Resource == "" || r.GVR.Version == "":
			errs = append(errs, fmt.Errorf("resource %q needs a resource and a version", r.GVR))
		case seen[r.GVR]:
			errs = append(errs, fmt.Errorf("resource %s is configured twice", r.GVR))
		}
		seen[r.GVR] = true
	}
	return errors.Join(errs...)
}

// resources returns the configured resources or the defaults.
func (cfg *Config) resources() []Resource {
	if cfg.Resources == nil {
		return DefaultResources()
	}
	return cfg.Resources
}

// rateLimiter returns the configured rate limiter or the default.
func (cfg *Config) rateLimiter() workqueue.TypedRateLimiter[Key] {
	if cfg.RateLimiter != nil {
		return cfg.RateLimiter
	}
	return workqueue.NewTypedItemExponentialFailureRateLimiter[Key](defaultBaseDelay, defaultMaxDelay)
}
