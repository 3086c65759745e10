package partition

import (
	"context"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// HistoryTrim releases the watch cache's history of deleted objects.
//
// The upstream watch cache keeps recent events (at least 75 seconds' worth,
// up to 102,400) so that watches can resume, and shrinks that history only
// when newer events displace it (storage/cacher/watch_cache_history.go). A
// delete event holds the deleted object. After a mass deletion followed by
// quiet (a removed shard's partition purged, a type emptied), the cache
// would hold every deleted object for as long as the type stays quiet.
//
// So when a type has seen at least MinDeletes deletions and then no change
// for Idle, its watch cache is made to relist: the raw watch it fills itself
// from ends with "resource version too old", exactly as after an etcd
// compaction. The relist replaces the cache and empties the history; watches
// of the type end and their clients resume or relist, as after a compaction.
type HistoryTrim struct {
	// MinDeletes is how many deletions make a history worth releasing;
	// 0 means DefaultHistoryTrimMinDeletes, negative disables trimming.
	MinDeletes int
	// Idle is how long the type must have been quiet; 0 means
	// DefaultHistoryTrimIdle. It should exceed the watch cache's history
	// window (75 s), after which resuming watches is not promised anyway.
	Idle time.Duration
	// Clock is for tests; nil means the real clock.
	Clock clock.WithTicker
}

const (
	// DefaultHistoryTrimMinDeletes makes small deletions never trigger a
	// relist: their history costs less than a relist.
	DefaultHistoryTrimMinDeletes = 1000
	// DefaultHistoryTrimIdle is a little more than the watch cache's history
	// window.
	DefaultHistoryTrimIdle = 90 * time.Second
)

func (h HistoryTrim) withDefaults() HistoryTrim {
	if h.MinDeletes == 0 {
		h.MinDeletes = DefaultHistoryTrimMinDeletes
	}
	if h.Idle == 0 {
		h.Idle = DefaultHistoryTrimIdle
	}
	if h.Clock == nil {
		h.Clock = clock.RealClock{}
	}
	return h
}

// cacherSource is the raw storage a watch cache fills itself from. It
// declares watch-list unsupported (see watchListUnsupported's comment in
// decorator.go) and trims the history as HistoryTrim describes.
type cacherSource struct {
	storage.Interface
	trim HistoryTrim
	// majority, for a member of an in-memory group, keeps the cacher's
	// watch through a lost majority (majority.go); nil otherwise.
	majority Majority

	// unpartitioned leaves out objects the watch cache could not key.
	unpartitioned *unpartitioned

	mu        sync.Mutex
	deletes   int
	lastEvent time.Time
	current   *trimmableWatch
}

// IsWatchListSemanticsUnSupported makes the cacher's reflector fill the
// watch cache with LIST+WATCH instead of a streaming watch-list. client-go's
// watch-list buffers initial events in a store keyed by namespace/name
// (tools/cache/reflector.go), which would keep one of several same-named
// objects from different partitions. The cacher asks through
// watchlist.DoesClientNotSupportWatchListSemantics.
func (*cacherSource) IsWatchListSemanticsUnSupported() bool { return true }

func newCacherSource(raw storage.Interface, resource string, trim HistoryTrim, majority Majority) *cacherSource {
	trim = trim.withDefaults()
	return &cacherSource{Interface: raw, trim: trim, majority: majority, lastEvent: trim.Clock.Now(), unpartitioned: &unpartitioned{resource: resource}}
}

// Watch wraps the cacher's own watch (the only caller that asks etcd for
// progress notifications; watches the cache delegates to etcd never do) so
// that its events are counted, it can be ended, and objects the cache
// cannot key are left out (unpartitioned.go).
func (s *cacherSource) Watch(ctx context.Context, key string, opts storage.ListOptions) (watch.Interface, error) {
	if !opts.ProgressNotify {
		return s.Interface.Watch(unscopedStorageContext(ctx), key, opts)
	}
	w, err := s.watch(ctx, key, opts)
	if err != nil {
		return nil, err
	}
	if s.majority != nil {
		w = newMajorityWatch(ctx, w, opts.ResourceVersion, s.majority, func(rv string) (watch.Interface, error) {
			resumed := opts
			resumed.ResourceVersion = rv
			return s.watch(ctx, key, resumed)
		})
	}
	if s.trim.MinDeletes < 0 {
		return w, nil
	}
	tw := newTrimmableWatch(w, s.observe)
	s.mu.Lock()
	s.current, s.deletes, s.lastEvent = tw, 0, s.trim.Clock.Now()
	s.mu.Unlock()
	return tw, nil
}

// watch is the cacher's raw watch, without the objects it cannot key.
func (s *cacherSource) watch(ctx context.Context, key string, opts storage.ListOptions) (watch.Interface, error) {
	w, err := s.Interface.Watch(unscopedStorageContext(ctx), key, opts)
	if err != nil {
		return nil, err
	}
	return s.unpartitioned.filterWatch(w), nil
}

// GetList serves the watch cache's own list, its consistency checks and
// the reads it delegates to storage; see unscopedStorageContext. Objects
// the cache cannot key are left out (unpartitioned.go).
func (s *cacherSource) GetList(ctx context.Context, key string, opts storage.ListOptions, listObj runtime.Object) error {
	if err := s.needMajority(); err != nil {
		return err
	}
	if err := s.Interface.GetList(unscopedStorageContext(ctx), key, opts, listObj); err != nil {
		return err
	}
	return s.unpartitioned.filterList(listObj)
}

// Stats counts the objects in etcd, which needs the majority; without it,
// the count is unknown at once instead of after a timeout (a LIST then
// reserves the whole list budget, dataplane/lists.go).
func (s *cacherSource) Stats(ctx context.Context) (storage.Stats, error) {
	if err := s.needMajority(); err != nil {
		return storage.Stats{}, err
	}
	return s.Interface.Stats(ctx)
}

// needMajority refuses at once what etcd would make wait for a leader.
func (s *cacherSource) needMajority() error {
	if s.majority == nil {
		return nil
	}
	if lost, since := s.majority.Lost(); lost {
		return errMajorityLost(since)
	}
	return nil
}

func (s *cacherSource) observe(t watch.EventType) {
	if t == watch.Bookmark || t == watch.Error {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lastEvent = s.trim.Clock.Now()
	if t == watch.Deleted {
		s.deletes++
	}
}

// run checks for a history worth releasing until stop is closed.
func (s *cacherSource) run(resource string, stop <-chan struct{}) {
	if s.trim.MinDeletes < 0 {
		return
	}
	t := s.trim.Clock.NewTicker(s.trim.Idle / 4)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C():
			s.maybeTrim(resource)
		}
	}
}

func (s *cacherSource) maybeTrim(resource string) {
	s.mu.Lock()
	w, deletes := s.current, s.deletes
	idle := s.trim.Clock.Since(s.lastEvent)
	if w == nil || deletes < s.trim.MinDeletes || idle < s.trim.Idle {
		s.mu.Unlock()
		return
	}
	s.current, s.deletes = nil, 0
	s.mu.Unlock()
	klog.Background().WithName("partition").Info("Releasing the watch cache history of deleted objects", "resource", resource, "deletions", deletes, "idle", idle.Round(time.Second))
	w.expire(fmt.Sprintf("releasing the history of %d deletions after %s without changes", deletes, idle.Round(time.Second)))
}

// trimmableWatch forwards a watch's events, counting them, and can end it
// with a "too old" error.
type trimmableWatch struct {
	in       watch.Interface
	out      chan watch.Event
	stopOnce sync.Once
	stopped  chan struct{}
	expired  chan string
}

func newTrimmableWatch(in watch.Interface, observe func(watch.EventType)) *trimmableWatch {
	w := &trimmableWatch{in: in, out: make(chan watch.Event), stopped: make(chan struct{}), expired: make(chan string, 1)}
	go w.forward(observe)
	return w
}

func (w *trimmableWatch) forward(observe func(watch.EventType)) {
	defer close(w.out)
	defer w.in.Stop()
	for {
		select {
		case ev, ok := <-w.in.ResultChan():
			if !ok {
				return
			}
			observe(ev.Type)
			select {
			case w.out <- ev:
			case <-w.stopped:
				return
			}
		case reason := <-w.expired:
			status := apierrors.NewResourceExpired(reason).Status()
			select {
			case w.out <- watch.Event{Type: watch.Error, Object: &status}:
			case <-w.stopped:
			}
			return
		case <-w.stopped:
			return
		}
	}
}

func (w *trimmableWatch) expire(reason string) {
	select {
	case w.expired <- reason:
	default:
	}
}

func (w *trimmableWatch) Stop() { w.stopOnce.Do(func() { close(w.stopped) }) }

func (w *trimmableWatch) ResultChan() <-chan watch.Event { return w.out }
