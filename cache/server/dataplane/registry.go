package dataplane

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/handlers"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// Config is what a Registry needs from its server.
type Config struct {
	// RESTOptionsGetter provides etcd and the partitioned storage decorator.
	RESTOptionsGetter generic.RESTOptionsGetter
	// Authorizer and Admission are the server's; Admission may be nil.
	Authorizer authorizer.Authorizer
	Admission  admission.Interface
	// MaxRequestBodyBytes bounds request bodies; larger ones get 413.
	MaxRequestBodyBytes int64
	// MinRequestTimeout is the shortest watch timeout handed out.
	MinRequestTimeout time.Duration
	// Lists bound the LISTs served at once.
	Lists ListLimits
	// ServeCBOR answers in CBOR (application/cbor) the clients whose Accept
	// header prefers it; JSON stays the default and request bodies stay
	// JSON or YAML. The server sets it from upstream's feature gate
	// CBORServingAndStorage, as apiextensions serves custom resources.
	ServeCBOR bool
}

// Registry is the set of served types. It is safe for concurrent use; types
// come and go while requests are served.
type Registry struct {
	cfg Config
	// lists is the LIST budget; counts the object counts it estimates
	// LISTs by.
	lists  *listBudget
	counts *objectCounts
	// flights are the identical LISTs answered together (sharedlists.go).
	flights *listFlights
	// copyScopes are the request scopes of writes of copies.
	copyScopes copyScopes

	mu     sync.RWMutex
	served map[schema.GroupResource]*served
	// published are the resources CachedResources publish, served without
	// identity where served has no type of that name (see published.go).
	published map[schema.GroupResource]*publishedType
	// sourcesAdded and pendingSources say whether every declaration source
	// has delivered its initial set; until then an unknown type may still
	// appear, so its requests get 503 instead of 404.
	sourcesAdded   atomic.Bool
	pendingSources atomic.Int32
	// crds is the CRD informer's store (WatchCRDs): a type whose CRD is
	// Established there but which is not registered yet is one upstream's
	// own handler (the delegate) would already serve, outside any
	// partition; the handler answers 503 for it instead.
	crds atomic.Pointer[cache.Store]
	// destroyed is set by Destroy: the server is shutting down, and no
	// storage is built or served any more. A mounted cache's host keeps
	// routing requests to it meanwhile, and apiextensions' own handler,
	// asked instead, would build storage nobody destroys.
	destroyed bool
}

// served is one type as served: its declaration, its store and a request
// scope per version. It is replaced whole, never changed.
type served struct {
	resource Resource
	// pinned declarations (bootstrapped types) are never removed, and
	// other sources can only add versions to them.
	pinned bool
	store  *registry.Store
	scopes map[string]*handlers.RequestScope
}

// errShuttingDown refuses a declaration after Destroy.
var errShuttingDown = errors.New("the cache server is shutting down")

// NewRegistry returns an empty registry.
func NewRegistry(cfg Config) *Registry {
	return &Registry{cfg: cfg, lists: newListBudget(cfg.Lists), flights: newListFlights(), counts: newObjectCounts(clock.RealClock{}), served: map[schema.GroupResource]*served{}, published: map[schema.GroupResource]*publishedType{}}
}

// Pin registers a type that is served for the registry's whole life, such
// as a bootstrapped type, whatever other sources say about it later.
func (r *Registry) Pin(ctx context.Context, res Resource) error {
	return r.register(ctx, res, true)
}

// Register serves res, or updates how it is served. A change of served
// versions keeps the storage (and its watch cache); any other change builds
// a new one.
func (r *Registry) Register(ctx context.Context, res Resource) error {
	return r.register(ctx, res, false)
}

func (r *Registry) register(ctx context.Context, res Resource, pin bool) error {
	if err := res.Validate(); err != nil {
		return err
	}
	logger := klog.FromContext(ctx).WithValues("resource", res.GroupResource())
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.destroyed {
		return errShuttingDown
	}
	gr := res.GroupResource()
	old := r.served[gr]
	if old != nil && old.pinned && !pin {
		// Other sources may add versions to a bootstrapped type, nothing else.
		merged := old.resource
		merged.Versions = unionVersions(old.resource.Versions, res.Versions)
		if !res.sameStorage(old.resource) {
			logger.Info("Ignoring a changed declaration of a bootstrapped type; only added versions take effect", "declared", res)
		}
		res = merged
	}
	pin = pin || (old != nil && old.pinned)
	if old != nil && old.resource.equal(res) {
		old.pinned = old.pinned || pin
		return nil
	}
	t := newTyping(res)
	s := &served{resource: res, pinned: pin}
	if old != nil && old.resource.sameStorage(res) {
		s.store = old.store
	} else {
		store, err := newStore(res, r.cfg.RESTOptionsGetter, t)
		if err != nil {
			return fmt.Errorf("building storage of %s: %w", gr, err)
		}
		s.store = store
	}
	tables, err := newTableConvertor(res, s.store)
	if err != nil {
		if s.store != oldStore(old) {
			s.store.DestroyFunc()
		}
		return fmt.Errorf("printer columns of %s: %w", gr, err)
	}
	scopes, err := newRequestScopes(res, t, tables, scopeConfig{authorizer: r.cfg.Authorizer, maxRequestBodyBytes: r.cfg.MaxRequestBodyBytes, cbor: r.cfg.ServeCBOR})
	if err != nil {
		if s.store != oldStore(old) {
			s.store.DestroyFunc()
		}
		return fmt.Errorf("building request scopes of %s: %w", gr, err)
	}
	s.scopes = scopes
	r.served[gr] = s
	if old != nil && old.store != s.store {
		old.store.DestroyFunc()
	}
	logger.V(2).Info("Serving type", "versions", res.Versions, "kind", res.Kind, "namespaced", res.Namespaced, "names", res.nameRule())
	return nil
}

// Unregister stops serving gr, unless it is pinned. Its data stays in etcd.
func (r *Registry) Unregister(ctx context.Context, gr schema.GroupResource) {
	r.mu.Lock()
	s := r.served[gr]
	if s == nil || s.pinned {
		r.mu.Unlock()
		return
	}
	delete(r.served, gr)
	r.mu.Unlock()
	s.store.DestroyFunc()
	klog.FromContext(ctx).V(2).Info("Stopped serving type", "resource", gr)
}

// Resources returns the declarations currently served, sorted.
func (r *Registry) Resources() []Resource {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]Resource, 0, len(r.served))
	for _, s := range r.served {
		out = append(out, s.resource)
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].GroupResource().String() < out[j].GroupResource().String()
	})
	return out
}

// AddSource records a declaration source (the CRDs, the exported resources)
// that has not delivered its initial set yet; the source calls the returned
// function once it has. Once every source added has, an unknown type is
// answered with 404.
func (r *Registry) AddSource() (synced func()) {
	r.pendingSources.Add(1)
	r.sourcesAdded.Store(true)
	var once sync.Once
	return func() { once.Do(func() { r.pendingSources.Add(-1) }) }
}

// synced reports whether every source has delivered its initial set.
func (r *Registry) synced() bool {
	return r.sourcesAdded.Load() && r.pendingSources.Load() == 0
}

// ReadinessCheck fails while a pinned type's storage is not ready to serve.
func (r *Registry) ReadinessCheck() error {
	r.mu.RLock()
	defer r.mu.RUnlock()
	for gr, s := range r.served {
		if !s.pinned {
			continue
		}
		if err := s.store.ReadinessCheck(); err != nil {
			return fmt.Errorf("%s: %w", gr, err)
		}
	}
	return nil
}

// Destroy stops every store's watch cache, the object counts under way and
// the LIST budget's pending memory return. The registry serves nothing
// afterwards.
func (r *Registry) Destroy() {
	r.lists.stop()
	r.counts.stop()
	r.mu.Lock()
	r.destroyed = true
	all := r.served
	r.served = map[schema.GroupResource]*served{}
	// Published resources hold no watch cache; they read etcd per request.
	r.published = map[schema.GroupResource]*publishedType{}
	r.mu.Unlock()
	for _, s := range all {
		s.store.DestroyFunc()
	}
}

func (r *Registry) lookup(gr schema.GroupResource) (s *served, destroyed bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.served[gr], r.destroyed
}

func oldStore(old *served) *registry.Store {
	if old == nil {
		return nil
	}
	return old.store
}

func unionVersions(a, b []string) []string {
	out := slices.Clone(a)
	for _, v := range b {
		if !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	return out
}
