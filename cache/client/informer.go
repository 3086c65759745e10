package client

import (
	"context"
	"errors"
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

// AddEventHandler adds a handler with the informer's resync period.
func (i *Informer) AddEventHandler(handler cache.ResourceEventHandler) (cache.ResourceEventHandlerRegistration, error) {
	return i.AddEventHandlerWithOptions(handler, cache.HandlerOptions{})
}

// AddEventHandlerWithResyncPeriod adds a handler that wants resyncs when
// resyncPeriod is not zero; they come at the informer's period.
func (i *Informer) AddEventHandlerWithResyncPeriod(handler cache.ResourceEventHandler, resyncPeriod time.Duration) (cache.ResourceEventHandlerRegistration, error) {
	return i.AddEventHandlerWithOptions(handler, cache.HandlerOptions{ResyncPeriod: &resyncPeriod})
}

// AddEventHandlerWithOptions adds a handler. It first receives an add, marked
// as part of the initial list, for every object already in the store. It
// fails once the informer has stopped.
func (i *Informer) AddEventHandlerWithOptions(handler cache.ResourceEventHandler, options cache.HandlerOptions) (cache.ResourceEventHandlerRegistration, error) {
	i.distMu.Lock()
	defer i.distMu.Unlock()
	if i.stopped {
		return nil, fmt.Errorf("handler %v was not added: the informer for %s has stopped", handler, i.gvr)
	}
	wantsResync := i.resync > 0 && (options.ResyncPeriod == nil || *options.ResyncPeriod > 0)
	l := newListener(fmt.Sprintf("handler %T of informer %s", handler, i.gvr), handler, wantsResync)
	for _, obj := range i.indexer.List() {
		l.add(notification{kind: addKind, obj: obj, isInitialList: true})
	}
	if i.upstreamSynced {
		l.tracker.UpstreamHasSynced()
	}
	i.listeners = append(i.listeners, l)
	if i.running {
		i.startListener(l)
	}
	return l, nil
}

// RemoveEventHandler stops delivering to a handler; removing one twice is
// not an error.
func (i *Informer) RemoveEventHandler(handle cache.ResourceEventHandlerRegistration) error {
	l, ok := handle.(*listener)
	if !ok {
		return fmt.Errorf("registration %T was not made by a kcp-cache informer", handle)
	}
	i.distMu.Lock()
	defer i.distMu.Unlock()
	for idx, candidate := range i.listeners {
		if candidate == l {
			i.listeners = append(i.listeners[:idx], i.listeners[idx+1:]...)
			l.stop()
			break
		}
	}
	return nil
}

// GetStore returns the informer's store, the same object as GetIndexer.
func (i *Informer) GetStore() cache.Store { return i.indexer }

// GetIndexer returns the informer's indexer, keyed by KeyFunc and carrying
// the indexes of Indexers.
func (i *Informer) GetIndexer() cache.Indexer { return i.indexer }

// AddIndexers adds indexes to the informer's indexer.
func (i *Informer) AddIndexers(indexers cache.Indexers) error { return i.indexer.AddIndexers(indexers) }

// GetController returns a view of the informer as a cache.Controller. Its
// Run methods do nothing: run the informer instead.
func (i *Informer) GetController() cache.Controller { return informerController{i} }

// HasSynced is true once the initial list is in the store.
func (i *Informer) HasSynced() bool {
	select {
	case <-i.synced:
		return true
	default:
		return false
	}
}

// HasSyncedChecker returns a cache.DoneChecker for HasSynced.
func (i *Informer) HasSyncedChecker() cache.DoneChecker { return syncedChecker{i} }

// LastSyncResourceVersion returns the resource version the store was last
// synced at, "" before the informer runs.
func (i *Informer) LastSyncResourceVersion() string {
	i.mu.Lock()
	controller := i.controller
	i.mu.Unlock()
	if controller == nil {
		return ""
	}
	return controller.LastSyncResourceVersion()
}

// SetWatchErrorHandler sets the handler called when a list or watch fails.
// It must be called before the informer runs.
func (i *Informer) SetWatchErrorHandler(handler cache.WatchErrorHandler) error {
	return i.SetWatchErrorHandlerWithContext(func(_ context.Context, r *cache.Reflector, err error) {
		handler(r, err)
	})
}

// SetWatchErrorHandlerWithContext is SetWatchErrorHandler with a context.
func (i *Informer) SetWatchErrorHandlerWithContext(handler cache.WatchErrorHandlerWithContext) error {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.started {
		return errAlreadyStarted
	}
	i.watchErrorHandler = handler
	return nil
}

// SetTransform sets a function applied to every object before it is stored.
// It must be called before the informer runs, and must keep the shard and
// cluster annotations, which the store key is made of.
func (i *Informer) SetTransform(transform cache.TransformFunc) error {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.started {
		return errAlreadyStarted
	}
	i.transform = transform
	return nil
}

// IsStopped is true once the informer has stopped running.
func (i *Informer) IsStopped() bool {
	i.distMu.Lock()
	defer i.distMu.Unlock()
	return i.stopped
}

var errAlreadyStarted = errors.New("informer has already started")

// syncedChecker is the cache.DoneChecker of an Informer.
type syncedChecker struct{ i *Informer }

// Name implements cache.DoneChecker.
func (c syncedChecker) Name() string { return "kcp-cache informer for " + c.i.gvr.String() }

// Done implements cache.DoneChecker.
func (c syncedChecker) Done() <-chan struct{} { return c.i.synced }

// informerController answers cache.Controller questions for an Informer.
type informerController struct{ i *Informer }

// Run does nothing; the informer runs the real controller.
func (c informerController) Run(<-chan struct{}) {}

// RunWithContext does nothing; the informer runs the real controller.
func (c informerController) RunWithContext(context.Context) {}

// HasSynced implements cache.Controller.
func (c informerController) HasSynced() bool { return c.i.HasSynced() }

// HasSyncedChecker implements cache.Controller.
func (c informerController) HasSyncedChecker() cache.DoneChecker { return c.i.HasSyncedChecker() }

// LastSyncResourceVersion implements cache.Controller.
func (c informerController) LastSyncResourceVersion() string { return c.i.LastSyncResourceVersion() }
