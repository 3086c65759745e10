package partition

import (
	"context"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/klog/v2"
)

// Majority says whether the storage's etcd member is cut off from its
// majority, and since when (embeddedetcd.Majority, for a member of an
// in-memory group). Storage without a group has none.
type Majority interface {
	Lost() (lost bool, since time.Time)
}

// majorityRecheck is how often a held watch checks whether the majority is
// back.
const majorityRecheck = 100 * time.Millisecond

// A member of an in-memory group that loses its majority still holds, in
// its watch caches, every write it applied. Upstream's storage would throw
// that away: etcd ends every watch that asked for a leader
// (clientv3.WithRequireLeader, which storage/etcd3's store.watchContext
// always adds) once the member has had none for three election timeouts;
// the cacher then relists, which needs the leader too, and until it can,
// it is not ready and hands every read to etcd, where it waits for a
// leader. So the cacher's own watch is held open while the majority is
// lost (no event can happen then: nothing commits without a majority) and
// resumed from its last revision once it is back; the watch cache stays
// ready and serves resourceVersion=0 reads. Consistent reads and writes are
// refused before they reach storage (filters.WithMajority).

// errMajorityLost is the storage's answer to what needs the majority.
func errMajorityLost(since time.Time) error {
	return apierrors.NewServiceUnavailable(fmt.Sprintf(
		"this member of the in-memory group has been cut off from its majority for %s: a write or a consistent read needs the majority",
		time.Since(since).Round(time.Millisecond)))
}

// majorityWatch forwards a watch and, when it ends while the majority is
// lost, opens it again from its last revision once the majority is back,
// instead of ending.
type majorityWatch struct {
	majority Majority
	reopen   func(rv string) (watch.Interface, error)
	logger   klog.Logger

	in       watch.Interface
	rv       string
	out      chan watch.Event
	stopOnce sync.Once
	stopped  chan struct{}
}

func newMajorityWatch(ctx context.Context, in watch.Interface, rv string, majority Majority, reopen func(rv string) (watch.Interface, error)) *majorityWatch {
	w := &majorityWatch{majority: majority, reopen: reopen, logger: klog.FromContext(ctx), in: in, rv: rv,
		out: make(chan watch.Event), stopped: make(chan struct{})}
	go w.run(ctx)
	return w
}

func (w *majorityWatch) run(ctx context.Context) {
	defer close(w.out)
	for {
		end, ok := w.forward()
		w.in.Stop()
		if !ok {
			return
		}
		if lost, _ := w.majority.Lost(); !lost {
			if end != nil {
				select {
				case w.out <- *end:
				case <-w.stopped:
				}
			}
			return
		}
		w.logger.Info("Holding the watch cache's watch while this member is cut off from its majority", "resourceVersion", w.rv)
		if !w.awaitMajority(ctx) {
			return
		}
		in, err := w.reopen(w.rv)
		if err != nil {
			status := apierrors.NewInternalError(fmt.Errorf("resuming the watch at revision %s after the majority came back: %w", w.rv, err)).Status()
			select {
			case w.out <- watch.Event{Type: watch.Error, Object: &status}:
			case <-w.stopped:
			}
			return
		}
		w.logger.Info("The majority is back: the watch cache's watch resumed", "resourceVersion", w.rv)
		w.in = in
	}
}

// forward passes events on until the watch ends: it returns the error event
// that ended it (nil when its channel closed), and false when the watch was
// stopped.
func (w *majorityWatch) forward() (*watch.Event, bool) {
	for {
		select {
		case ev, open := <-w.in.ResultChan():
			if !open {
				return nil, true
			}
			if ev.Type == watch.Error {
				return &ev, true
			}
			if rv := resourceVersionOf(ev); rv != "" {
				w.rv = rv
			}
			select {
			case w.out <- ev:
			case <-w.stopped:
				return nil, false
			}
		case <-w.stopped:
			return nil, false
		}
	}
}

// awaitMajority waits until the majority is back; false when the watch was
// stopped first.
func (w *majorityWatch) awaitMajority(ctx context.Context) bool {
	t := time.NewTicker(majorityRecheck)
	defer t.Stop()
	for {
		select {
		case <-w.stopped:
			return false
		case <-ctx.Done():
			return false
		case <-t.C:
			if lost, _ := w.majority.Lost(); !lost {
				return true
			}
		}
	}
}

func resourceVersionOf(ev watch.Event) string {
	if ev.Object == nil {
		return ""
	}
	m, err := meta.Accessor(ev.Object)
	if err != nil {
		return ""
	}
	return m.GetResourceVersion()
}

func (w *majorityWatch) Stop() { w.stopOnce.Do(func() { close(w.stopped) }) }

func (w *majorityWatch) ResultChan() <-chan watch.Event { return w.out }

// What the cacher and the delegator ask of etcd directly needs the
// majority: refused at once when it is lost, instead of waiting for a
// leader until the request times out.

func (s *cacherSource) Create(ctx context.Context, key string, obj, out runtime.Object, ttl uint64) error {
	if err := s.needMajority(); err != nil {
		return err
	}
	return s.Interface.Create(ctx, key, obj, out, ttl)
}

func (s *cacherSource) Delete(ctx context.Context, key string, out runtime.Object, preconditions *storage.Preconditions,
	validateDeletion storage.ValidateObjectFunc, cachedExistingObject runtime.Object, opts storage.DeleteOptions) error {
	if err := s.needMajority(); err != nil {
		return err
	}
	return s.Interface.Delete(ctx, key, out, preconditions, validateDeletion, cachedExistingObject, opts)
}

func (s *cacherSource) Get(ctx context.Context, key string, opts storage.GetOptions, objPtr runtime.Object) error {
	if err := s.needMajority(); err != nil {
		return err
	}
	return s.Interface.Get(ctx, key, opts, objPtr)
}

func (s *cacherSource) GuaranteedUpdate(ctx context.Context, key string, destination runtime.Object, ignoreNotFound bool,
	preconditions *storage.Preconditions, tryUpdate storage.UpdateFunc, cachedExistingObject runtime.Object) error {
	if err := s.needMajority(); err != nil {
		return err
	}
	return s.Interface.GuaranteedUpdate(ctx, key, destination, ignoreNotFound, preconditions, tryUpdate, cachedExistingObject)
}

func (s *cacherSource) GetCurrentResourceVersion(ctx context.Context) (uint64, error) {
	if err := s.needMajority(); err != nil {
		return 0, err
	}
	return s.Interface.GetCurrentResourceVersion(ctx)
}
