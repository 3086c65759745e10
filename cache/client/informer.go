package client

import (
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// Informer is a cache.SharedIndexInformer for one resource in one scope of a
// kcp-cache server. It differs from client-go's in two ways that client-go
// cannot be configured for: its store is keyed by KeyFunc, so copies with the
// same name from different shards or clusters coexist, and it never streams
// its initial list (see the package documentation). It also reports its
// freshness.
//
// Each handler gets its events on its own goroutine, in store order. Per-handler
// resync periods are not honoured: a handler that asks for resyncs (or takes
// the default) gets them at the informer's period, and none if that is zero.
type Informer struct {
	gvr       schema.GroupVersionResource
	lw        *observedListerWatcher
	indexer   cache.Indexer
	resync    time.Duration
	freshness *freshness
	// synced is closed once the initial list is in the indexer.
	synced chan struct{}

	mu                sync.Mutex // guards the fields below
	started           bool
	transform         cache.TransformFunc
	watchErrorHandler cache.WatchErrorHandlerWithContext
	controller        cache.Controller

	// distMu orders store updates and their notifications against handler
	// registration, so a new handler sees each object exactly once: in its
	// replay of the store, or as an event after it.
	distMu         sync.Mutex
	listeners      []*listener
	upstreamSynced bool
	running        bool
	stopped        bool
	// listenersWG tracks listener goroutines, so Run returns after them.
	listenersWG sync.WaitGroup
}

var _ cache.SharedIndexInformer = &Informer{}

// newInformer returns an informer for gvr over lw.
func newInformer(gvr schema.GroupVersionResource, lw cache.ListerWatcher, resync time.Duration, c clock.PassiveClock) *Informer {
	f := newFreshness(c)
	return &Informer{
		gvr:       gvr,
		lw:        newObservedListerWatcher(lw, f),
		indexer:   cache.NewIndexer(KeyFunc, Indexers()),
		resync:    resync,
		freshness: f,
		synced:    make(chan struct{}),
	}
}

// ListEpoch returns the cache epoch (kcpcache.EpochHeader) of the
// informer's last complete list, and false before its first list or when its
// client tracks no epochs. The store holds that epoch's objects.
func (i *Informer) ListEpoch() (string, bool) {
	if i.lw.epochs == nil {
		return "", false
	}
	return i.lw.lastListEpoch()
}

// Freshness returns when the informer last completed a list (zero before the
// first) and whether its watch is established now. A watching informer is as
// fresh as the server; one that is not has been stale since its watch ended.
func (i *Informer) Freshness() (lastSync time.Time, watching bool) {
	return i.freshness.get()
}

// Run runs the informer until stopCh is closed.
func (i *Informer) Run(stopCh <-chan struct{}) {
	i.RunWithContext(wait.ContextForChannel(stopCh))
}

// RunWithContext runs the informer until ctx is done, and returns once its
// handlers' goroutines have ended. An informer runs at most once.
func (i *Informer) RunWithContext(ctx context.Context) {
	i.mu.Lock()
	if i.started {
		i.mu.Unlock()
		klog.FromContext(ctx).Info("Warning: informer has already been started; not running it again", "resource", i.gvr)
		return
	}
	i.started = true
	fifo := cache.NewRealFIFOWithOptions(cache.RealFIFOOptions{
		Name: "kcp-cache " + i.gvr.String(),
		// The queue and the indexer must agree on keys, or a relist would
		// delete and re-add every object.
		KeyFunction:  KeyFunc,
		KnownObjects: i.indexer,
		Transformer:  i.transform,
	})
	i.controller = cache.New(&cache.Config{
		Queue:                        fifo,
		ListerWatcher:                i.lw,
		ObjectType:                   &unstructured.Unstructured{},
		ObjectDescription:            i.gvr.String(),
		FullResyncPeriod:             i.resync,
		ShouldResync:                 i.shouldResync,
		Process:                      i.process,
		WatchErrorHandlerWithContext: i.watchErrorHandler,
	})
	controller := i.controller
	i.mu.Unlock()

	i.distMu.Lock()
	i.running = true
	for _, l := range i.listeners {
		i.startListener(l)
	}
	i.distMu.Unlock()

	i.listenersWG.Add(1)
	go func() {
		defer i.listenersWG.Done()
		select {
		case <-ctx.Done():
		case <-controller.HasSyncedChecker().Done():
			i.markSynced()
		}
	}()

	controller.RunWithContext(ctx)

	i.distMu.Lock()
	i.stopped = true
	for _, l := range i.listeners {
		l.stop()
	}
	i.distMu.Unlock()
	i.listenersWG.Wait()
}

// startListener runs l; distMu must be held.
func (i *Informer) startListener(l *listener) {
	i.listenersWG.Add(1)
	go func() {
		defer i.listenersWG.Done()
		l.run()
	}()
}

// markSynced records that the initial list is in the store and has been
// queued to every handler.
func (i *Informer) markSynced() {
	i.distMu.Lock()
	defer i.distMu.Unlock()
	i.upstreamSynced = true
	for _, l := range i.listeners {
		l.tracker.UpstreamHasSynced()
	}
	close(i.synced)
}

// process applies one popped item to the store and notifies the handlers.
// It runs on the controller's single processing goroutine.
func (i *Informer) process(obj interface{}, isInInitialList bool) error {
	deltas, ok := obj.(cache.Deltas)
	if !ok {
		return fmt.Errorf("informer for %s: got %T from its queue, want cache.Deltas", i.gvr, obj)
	}
	i.distMu.Lock()
	defer i.distMu.Unlock()
	for _, d := range deltas {
		switch d.Type {
		case cache.Sync, cache.Replaced, cache.Added, cache.Updated:
			if old, exists, err := i.indexer.Get(d.Object); err == nil && exists {
				if err := i.indexer.Update(d.Object); err != nil {
					return err
				}
				// A relist returns unchanged objects too; like client-go, treat
				// those as a resync rather than flooding handlers with updates.
				isResync := d.Type == cache.Sync || (d.Type == cache.Replaced && sameResourceVersion(old, d.Object))
				i.notify(notification{kind: updateKind, oldObj: old, obj: d.Object}, isResync)
			} else {
				if err := i.indexer.Add(d.Object); err != nil {
					return err
				}
				i.notify(notification{kind: addKind, obj: d.Object, isInitialList: isInInitialList}, false)
			}
		case cache.Deleted:
			if err := i.indexer.Delete(d.Object); err != nil {
				return err
			}
			i.notify(notification{kind: deleteKind, obj: d.Object}, false)
		}
	}
	return nil
}

// notify queues n to every handler that takes it; distMu must be held.
func (i *Informer) notify(n notification, isResync bool) {
	for _, l := range i.listeners {
		if isResync && !l.wantsResync {
			continue
		}
		l.add(n)
	}
}

// shouldResync lets the reflector skip resyncs nobody asked for.
func (i *Informer) shouldResync() bool {
	i.distMu.Lock()
	defer i.distMu.Unlock()
	for _, l := range i.listeners {
		if l.wantsResync {
			return true
		}
	}
	return false
}

func sameResourceVersion(a, b interface{}) bool {
	ma, errA := meta.Accessor(a)
	mb, errB := meta.Accessor(b)
	return errA == nil && errB == nil && ma.GetResourceVersion() != "" && ma.GetResourceVersion() == mb.GetResourceVersion()
}
