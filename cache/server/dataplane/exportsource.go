package dataplane

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/server/opaque"
	"github.com/kcp-cache/kcp-cache/cache/server/partition"
)

// ExportedTypes names the served types whose cached objects declare identity
// resources. A zero GroupResource is a type the server does not serve.
type ExportedTypes struct {
	APIExports         schema.GroupResource
	APIResourceSchemas schema.GroupResource
	// CachedResources are kcp v0.32's, ClusterCachedResources kcp main's
	// (renamed, same fields); shards of both may share the cache.
	CachedResources        schema.GroupResource
	ClusterCachedResources schema.GroupResource
}

// rewatchDelay spaces attempts to follow a type whose watch failed.
const rewatchDelay = time.Second

// ExportSource serves "<resource>:<identity>" for every resource a cached
// APIExport exports (its APIResourceSchemas, in the same partition, say
// which resources, kinds, scopes and versions) and every CachedResource
// declares, and stops serving one once nothing declares it any more (its
// data stays). It also serves every resource CachedResources publish
// without identity (see publication), read-only. It follows the types
// through the registry's own stores, not through HTTP informers, so it
// holds a few fields per object rather than second copies of whole
// schemas.
type ExportSource struct {
	*exportSource
	types ExportedTypes
	// synced are the pending-source marks of the followed types.
	synced map[schema.GroupResource]func()
}

// NewExportSource prepares a source over types, which must be registered
// (pinned) already; etcd is the client that reads a resource published
// without identity (every identity at once, see partition.NewUnionDecorator).
// From now on the registry counts each followed type as a pending source
// until Run has delivered its objects once.
func NewExportSource(r *Registry, types ExportedTypes, etcd *clientv3.Client) *ExportSource {
	src := &ExportSource{
		exportSource: &exportSource{
			registry:      r,
			etcd:          etcd,
			exports:       map[partitionName]exportRecord{},
			schemas:       map[partitionName]schemaRecord{},
			cached:        map[partitionName]cachedResourceRecord{},
			clusterCached: map[partitionName]cachedResourceRecord{},
			registered:    map[schema.GroupResource]Resource{},
			published:     map[schema.GroupResource]publication{},
			changed:       make(chan struct{}, 1),
		},
		types:  types,
		synced: map[schema.GroupResource]func(){},
	}
	for _, gr := range []schema.GroupResource{types.APIExports, types.APIResourceSchemas, types.CachedResources, types.ClusterCachedResources} {
		if gr.Resource != "" {
			src.synced[gr] = r.AddSource()
		}
	}
	return src
}

// Run follows the types until ctx is done.
func (src *ExportSource) Run(ctx context.Context) {
	ctx = klog.NewContext(ctx, klog.FromContext(ctx).WithName("exported-resources"))
	// Run returns only once every type's watch has.
	var following sync.WaitGroup
	defer following.Wait()
	follow := func(gr schema.GroupResource, apply func(map[partitionName]*opaque.Object, *partitionName, *opaque.Object)) {
		if synced, ok := src.synced[gr]; ok {
			following.Go(func() { src.follow(ctx, gr, synced, apply) })
		}
	}
	follow(src.types.APIExports, func(all map[partitionName]*opaque.Object, k *partitionName, o *opaque.Object) {
		setRecords(&src.mu, src.exports, all, k, o, func(o *opaque.Object) (exportRecord, bool) { return parseExport(o.Body()) })
	})
	follow(src.types.APIResourceSchemas, func(all map[partitionName]*opaque.Object, k *partitionName, o *opaque.Object) {
		setRecords(&src.mu, src.schemas, all, k, o, func(o *opaque.Object) (schemaRecord, bool) { return parseSchema(o.Body()) })
	})
	parseCached := func(o *opaque.Object) (cachedResourceRecord, bool) {
		return parseCachedResource(o.Body(), o.GetAnnotations())
	}
	follow(src.types.CachedResources, func(all map[partitionName]*opaque.Object, k *partitionName, o *opaque.Object) {
		setRecords(&src.mu, src.cached, all, k, o, parseCached)
	})
	follow(src.types.ClusterCachedResources, func(all map[partitionName]*opaque.Object, k *partitionName, o *opaque.Object) {
		setRecords(&src.mu, src.clusterCached, all, k, o, parseCached)
	})
	src.reconcileLoop(ctx)
}

// exportSource is the state an ExportSource's goroutines share.
type exportSource struct {
	registry *Registry
	etcd     *clientv3.Client

	mu            sync.Mutex
	exports       map[partitionName]exportRecord
	schemas       map[partitionName]schemaRecord
	cached        map[partitionName]cachedResourceRecord
	clusterCached map[partitionName]cachedResourceRecord
	// pendingSynced are the synced marks of types whose initial sets the
	// next reconcile serves.
	pendingSynced []func()

	// registered and published are what this source has registered and
	// published (only the reconcile loop touches them); lastConflicts is
	// what was last logged.
	registered    map[schema.GroupResource]Resource
	published     map[schema.GroupResource]publication
	lastConflicts string
	// changed wakes the reconcile loop; one pending wake-up is enough.
	changed chan struct{}
}

// setRecords replaces every record (all != nil) or sets or removes one (o
// nil removes k); the caller wakes the reconcile loop.
func setRecords[R any](mu *sync.Mutex, records map[partitionName]R, all map[partitionName]*opaque.Object, k *partitionName, o *opaque.Object, parse func(*opaque.Object) (R, bool)) {
	mu.Lock()
	defer mu.Unlock()
	if all != nil {
		clear(records)
		for k, o := range all {
			if rec, ok := parse(o); ok {
				records[k] = rec
			}
		}
		return
	}
	if o == nil {
		delete(records, *k)
		return
	}
	if rec, ok := parse(o); ok {
		records[*k] = rec
	} else {
		delete(records, *k)
	}
}

// follow keeps one type's records current: a watch that first delivers
// every object (sendInitialEvents) and then changes, restarted with a fresh
// initial set whenever it ends (a timeout, a trimmed history, a restarted
// watch cache).
func (s *exportSource) follow(ctx context.Context, gr schema.GroupResource, synced func(), apply func(map[partitionName]*opaque.Object, *partitionName, *opaque.Object)) {
	defer utilruntime.HandleCrashWithContext(ctx)
	logger := klog.FromContext(ctx).WithValues("resource", gr)
	for ctx.Err() == nil {
		if err := s.followOnce(ctx, gr, synced, apply); err != nil && ctx.Err() == nil {
			logger.Info("Following the type failed, will retry", "err", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(rewatchDelay):
		}
	}
}

func (s *exportSource) followOnce(ctx context.Context, gr schema.GroupResource, synced func(), apply func(map[partitionName]*opaque.Object, *partitionName, *opaque.Object)) error {
	served, _ := s.registry.lookup(gr)
	if served == nil {
		return fmt.Errorf("%s is not served", gr)
	}
	// No scope in the context: the partitioned storage reads every
	// partition, as for "*/*". kcp's fork reads the wildcard from its own
	// context (partition.RequestContext; nothing upstream).
	ctx = partition.RequestContext(ctx, kcpcache.Scope{Shard: kcpcache.Wildcard, Cluster: kcpcache.Wildcard})
	w, err := served.store.Watch(ctx, &metainternalversion.ListOptions{
		ResourceVersion:      "0",
		ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan,
		SendInitialEvents:    ptr.To(true),
		AllowWatchBookmarks:  true,
	})
	if err != nil {
		return err
	}
	defer w.Stop()
	initial := map[partitionName]*opaque.Object{}
	for {
		var ev watch.Event
		var ok bool
		select {
		case <-ctx.Done():
			return nil
		case ev, ok = <-w.ResultChan():
		}
		if !ok {
			return nil
		}
		if ev.Type == watch.Error {
			return fmt.Errorf("watch of %s: %v", gr, ev.Object)
		}
		obj := ev.Object
		if c, ok := obj.(runtime.CacheableObject); ok {
			// The watch cache wraps events it serializes once for many
			// watchers.
			obj = c.GetObject()
		}
		o, isOpaque := obj.(*opaque.Object)
		if !isOpaque {
			continue
		}
		if ev.Type == watch.Bookmark {
			if initial != nil && o.GetAnnotations()[metav1.InitialEventsAnnotationKey] == "true" {
				apply(initial, nil, nil)
				initial = nil
				// Synced once what the initial set declares is served
				// (reconcile calls it), so that no request in between
				// takes a declared resource for an unknown one.
				s.mu.Lock()
				s.pendingSynced = append(s.pendingSynced, synced)
				s.mu.Unlock()
				s.wake()
			}
			continue
		}
		shard, cluster := o.PartitionAnnotations()
		k := partitionName{shard: shard, cluster: cluster, name: o.GetName()}
		if initial != nil {
			if ev.Type == watch.Deleted {
				delete(initial, k)
			} else {
				initial[k] = o
			}
			continue
		}
		if ev.Type == watch.Deleted {
			apply(nil, &k, nil)
		} else {
			apply(nil, &k, o)
		}
		s.wake()
	}
}

func (s *exportSource) wake() {
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// reconcileLoop registers what the records declare and unregisters what
// they no longer do, after every change.
func (s *exportSource) reconcileLoop(ctx context.Context) {
	defer utilruntime.HandleCrashWithContext(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.changed:
			s.reconcile(ctx)
		}
	}
}

func (s *exportSource) reconcile(ctx context.Context) {
	logger := klog.FromContext(ctx)
	s.mu.Lock()
	cached := []map[partitionName]cachedResourceRecord{s.cached, s.clusterCached}
	want, conflicts := identityResources(s.exports, s.schemas, cached)
	pubs, pubConflicts := publications(cached)
	synced := s.pendingSynced
	s.pendingSynced = nil
	s.mu.Unlock()
	defer func() {
		for _, f := range synced {
			f()
		}
	}()
	conflicts = append(conflicts, pubConflicts...)
	if msg := joinErrors(conflicts); msg != s.lastConflicts {
		if msg != "" {
			logger.Info("Conflicting declarations of identity resources", "conflicts", msg)
		}
		s.lastConflicts = msg
	}
	for gr, res := range want {
		if old, ok := s.registered[gr]; ok && old.equal(res) {
			continue
		}
		if err := s.registry.Register(ctx, res); err != nil {
			logger.Error(err, "Cannot serve an identity resource", "resource", gr)
			continue
		}
		s.registered[gr] = res
	}
	for gr := range s.registered {
		if _, ok := want[gr]; !ok {
			s.registry.Unregister(ctx, gr)
			delete(s.registered, gr)
		}
	}
	for gr, p := range pubs {
		if old, ok := s.published[gr]; ok && old.equal(p) {
			continue
		}
		if err := s.registry.publish(ctx, p, s.etcd); err != nil {
			logger.Error(err, "Cannot serve a published resource without identity", "resource", gr)
			continue
		}
		s.published[gr] = p
	}
	for gr := range s.published {
		if _, ok := pubs[gr]; !ok {
			s.registry.unpublish(ctx, gr)
			delete(s.published, gr)
		}
	}
}

func joinErrors(errs []error) string {
	msgs := make([]string, 0, len(errs))
	for _, err := range errs {
		msgs = append(msgs, err.Error())
	}
	return strings.Join(msgs, "; ")
}
