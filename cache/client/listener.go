package client

import (
	"sync"

	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/cache/synctrack"
)

// notification is one event for one handler.
type notification struct {
	kind          notificationKind
	oldObj, obj   interface{}
	isInitialList bool
}

type notificationKind int

const (
	addKind notificationKind = iota
	updateKind
	deleteKind
)

// listener delivers events to one handler on its own goroutine, through an
// unbounded queue, so a slow handler delays only itself and never the store.
// It is also the handler's registration.
type listener struct {
	handler     cache.ResourceEventHandler
	wantsResync bool
	// tracker counts initial-list adds not yet delivered, for HasSynced.
	tracker *synctrack.SingleFileTracker

	mu      sync.Mutex
	cond    sync.Cond
	pending []notification
	stopped bool
}

var _ cache.ResourceEventHandlerRegistration = &listener{}

func newListener(name string, handler cache.ResourceEventHandler, wantsResync bool) *listener {
	l := &listener{handler: handler, wantsResync: wantsResync, tracker: synctrack.NewSingleFileTracker(name)}
	l.cond.L = &l.mu
	return l
}

// HasSynced is true once the informer has synced and this handler has been
// given every object of the initial list.
func (l *listener) HasSynced() bool { return l.tracker.HasSynced() }

// HasSyncedChecker returns a cache.DoneChecker for HasSynced.
func (l *listener) HasSyncedChecker() cache.DoneChecker { return l.tracker }

// add queues n; it never blocks.
func (l *listener) add(n notification) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped {
		return
	}
	if n.kind == addKind && n.isInitialList {
		l.tracker.Start()
	}
	l.pending = append(l.pending, n)
	l.cond.Signal()
}

// run delivers notifications until stop.
func (l *listener) run() {
	for {
		l.mu.Lock()
		for len(l.pending) == 0 && !l.stopped {
			l.cond.Wait()
		}
		if l.stopped {
			l.mu.Unlock()
			return
		}
		n := l.pending[0]
		l.pending[0] = notification{} // let the object be collected
		l.pending = l.pending[1:]
		l.mu.Unlock()

		switch n.kind {
		case addKind:
			l.handler.OnAdd(n.obj, n.isInitialList)
			if n.isInitialList {
				l.tracker.Finished()
			}
		case updateKind:
			l.handler.OnUpdate(n.oldObj, n.obj)
		case deleteKind:
			l.handler.OnDelete(n.obj)
		}
	}
}

// stop ends run after the notification it is delivering, dropping the rest.
func (l *listener) stop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stopped = true
	l.pending = nil
	l.cond.Broadcast()
}
