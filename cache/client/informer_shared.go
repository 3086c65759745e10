package client

import (
	"context"
	"errors"

	"k8s.io/client-go/tools/cache"
)

// The rest of cache.SharedIndexInformer, so an Informer drops into code
// written for client-go's informers (cache.WaitForCacheSync, listers).

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
