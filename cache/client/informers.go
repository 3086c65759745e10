package client

import (
	"context"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

// InformerFactory makes shared Informers over one scope of a kcp-cache
// server, one per resource, and runs them. It is used like client-go's
// informer factories: ask for informers, Start, WaitForCacheSync, and
// Shutdown when done.
type InformerFactory struct {
	client *ClusterClient
	scope  kcpcache.Scope
	resync time.Duration

	// ctx is cancelled by Shutdown; every informer stops with it.
	ctx    context.Context
	cancel context.CancelFunc

	mu           sync.Mutex
	informers    map[schema.GroupVersionResource]*Informer
	started      map[schema.GroupVersionResource]bool
	shuttingDown bool
	wg           sync.WaitGroup
}

// NewInformerFactory returns a factory whose informers list and watch scope
// through client. An empty shard or cluster in scope means the wildcard, so
// the zero Scope watches every shard and cluster. An invalid name makes every
// list fail with the validation error, reported through the informers' watch
// error handlers. resync is the informers' resync period; zero disables it.
func NewInformerFactory(client *ClusterClient, scope kcpcache.Scope, resync time.Duration) *InformerFactory {
	if scope.Shard == "" {
		scope.Shard = kcpcache.Wildcard
	}
	if scope.Cluster == "" {
		scope.Cluster = kcpcache.Wildcard
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &InformerFactory{
		client:    client,
		scope:     scope,
		resync:    resync,
		ctx:       ctx,
		cancel:    cancel,
		informers: map[schema.GroupVersionResource]*Informer{},
		started:   map[schema.GroupVersionResource]bool{},
	}
}

// Scope returns the scope the factory's informers watch.
func (f *InformerFactory) Scope() kcpcache.Scope { return f.scope }

// ForResource returns the factory's informer for gvr, creating it on first
// use. Start runs informers created since the last Start.
func (f *InformerFactory) ForResource(gvr schema.GroupVersionResource) *Informer {
	f.mu.Lock()
	defer f.mu.Unlock()
	if inf, ok := f.informers[gvr]; ok {
		return inf
	}
	resource := f.client.Cluster(f.scope.Shard, f.scope.Cluster).Resource(gvr)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, options metav1.ListOptions) (runtime.Object, error) {
			return resource.List(ctx, options)
		},
		WatchFuncWithContext: func(ctx context.Context, options metav1.ListOptions) (watch.Interface, error) {
			return resource.Watch(ctx, options)
		},
	}
	inf := newInformer(gvr, lw, f.resync, clock.RealClock{})
	inf.lw.epochs = f.client.epochs
	f.informers[gvr] = inf
	return inf
}

// Start runs every informer not yet started, until ctx is done or Shutdown.
// It does not block. After Shutdown it does nothing.
func (f *InformerFactory) Start(ctx context.Context) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.shuttingDown {
		return
	}
	for gvr, inf := range f.informers {
		if f.started[gvr] {
			continue
		}
		f.started[gvr] = true
		runCtx, cancel := context.WithCancel(ctx)
		stopOnShutdown := context.AfterFunc(f.ctx, cancel)
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			defer stopOnShutdown()
			defer cancel()
			inf.RunWithContext(runCtx)
		}()
	}
}

// WaitForCacheSync waits until every started informer has synced or ctx is
// done, and reports which have synced.
func (f *InformerFactory) WaitForCacheSync(ctx context.Context) map[schema.GroupVersionResource]bool {
	f.mu.Lock()
	started := make(map[schema.GroupVersionResource]*Informer, len(f.started))
	for gvr := range f.started {
		started[gvr] = f.informers[gvr]
	}
	f.mu.Unlock()

	res := make(map[schema.GroupVersionResource]bool, len(started))
	for gvr, inf := range started {
		select {
		case <-inf.HasSyncedChecker().Done():
			res[gvr] = true
		case <-ctx.Done():
			res[gvr] = inf.HasSynced()
		}
	}
	return res
}

// Shutdown stops every informer and waits until their goroutines, handlers'
// included, have ended. Start does nothing afterwards.
func (f *InformerFactory) Shutdown() {
	f.mu.Lock()
	f.shuttingDown = true
	f.mu.Unlock()
	f.cancel()
	f.wg.Wait()
}
