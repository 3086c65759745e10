package client

import (
	"fmt"
	"time"

	"k8s.io/client-go/tools/cache"
)

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
