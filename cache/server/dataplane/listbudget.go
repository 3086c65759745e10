package dataplane

import (
	"container/list"
	"context"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"
)

// ListLimits bound the LISTs the data plane serves at once (see
// options.LimitOptions for the flags).
type ListLimits struct {
	// MaxObjectsInFlight is the budget: the most objects all LISTs hold and
	// encode at once. Zero: no budget.
	MaxObjectsInFlight int
	// WaitTimeout bounds a LIST's wait for the budget; it is then refused
	// with 429 and Retry-After.
	WaitTimeout time.Duration
	// ReturnMemory returns the heap a burst of LISTs left behind to the
	// operating system once the burst is over.
	ReturnMemory bool
}

const (
	// listRetryAfterSeconds is what a LIST refused for the budget is told
	// to wait; client-go retries a 429 by itself after it.
	listRetryAfterSeconds = 1

	// memoryReturnAfterObjects is how many objects LISTs must have handed
	// out since memory was last returned for another return to be worth a
	// forced collection: a few large LISTs' worth, not every small one.
	memoryReturnAfterObjects = 20000
	// memoryReturnQuiet is how long no LIST may run before memory is
	// returned: the burst is over, not paused between two LISTs.
	memoryReturnQuiet = time.Second
	// memoryReturnInterval rate-limits the forced collections, which stop
	// the process briefly and cost CPU in proportion to the live heap.
	memoryReturnInterval = time.Minute
)

// listBudget admits LISTs by their number of objects, first come first
// served: a LIST that does not fit waits until earlier ones release theirs.
// GETs and writes never wait for it, so they stay fast while large LISTs
// queue, and the memory of LISTs in flight (items, encoding buffers, gzip
// state) is bounded by the budget rather than by the number of clients.
type listBudget struct {
	limits ListLimits
	// freeOSMemory returns memory to the operating system (tests count
	// calls instead).
	freeOSMemory func()

	mu sync.Mutex
	// used is the objects reserved by admitted LISTs; it exceeds the budget
	// only when a LIST turned out larger than its estimate (see grow).
	used    int
	waiters list.List // of *listWaiter, in arrival order
	// active is the LISTs being served, admitted or not; listed the
	// objects they handed out since memory was last returned.
	active, listed int
	lastReturn     time.Time
	returnPending  bool
	// returnTimer is the pending memory return, stopped by stop so that
	// nothing of the budget runs after the registry is destroyed.
	returnTimer *time.Timer
	stopped     bool
}

type listWaiter struct {
	n     int
	ready chan struct{}
}

func newListBudget(limits ListLimits) *listBudget {
	return &listBudget{limits: limits, freeOSMemory: debug.FreeOSMemory}
}

// capacity is the budget; a reservation never exceeds it, so that a LIST
// larger than the whole budget runs alone instead of never.
func (b *listBudget) capacity() int { return b.limits.MaxObjectsInFlight }

// smallList is the share of the budget a LIST may take without waiting
// in line: a LIST of a few objects (an empty type's, an informer's of a
// small one) costs next to nothing and should not queue behind large ones
// for up to the wait timeout.
func (b *listBudget) smallList() int { return b.capacity() / 100 }

// acquire reserves n objects (at most the budget), waiting in line up to
// the wait timeout; after it, or when ctx ends, it answers 429. Small LISTs
// never wait.
func (b *listBudget) acquire(ctx context.Context, n int) (int, error) {
	if b.capacity() <= 0 {
		return 0, nil
	}
	n = min(max(n, 0), b.capacity())
	b.mu.Lock()
	if n <= b.smallList() || b.waiters.Len() == 0 && b.used+n <= b.capacity() {
		b.used += n
		b.mu.Unlock()
		return n, nil
	}
	w := &listWaiter{n: n, ready: make(chan struct{})}
	elem := b.waiters.PushBack(w)
	b.mu.Unlock()

	timer := time.NewTimer(b.limits.WaitTimeout)
	defer timer.Stop()
	select {
	case <-w.ready:
		return n, nil
	case <-ctx.Done():
	case <-timer.C:
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case <-w.ready:
		// Admitted while timing out: the caller's reservation holds it
		// and gives it back when the request ends.
		return n, nil
	default:
	}
	b.waiters.Remove(elem)
	// The first in line may have been what held the others back.
	b.admitLocked()
	return 0, apierrors.NewTooManyRequests(fmt.Sprintf(
		"too many objects are being listed at once (--max-list-objects-in-flight=%d); this LIST of about %d objects waited %s",
		b.capacity(), n, b.limits.WaitTimeout), listRetryAfterSeconds)
}

// release gives n reserved objects back and admits who fits next.
func (b *listBudget) release(n int) {
	if n <= 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used -= n
	b.admitLocked()
}

// grow adds n objects to a reservation without waiting: the LIST already
// holds them, and waiting while holding part of the budget could deadlock
// with another LIST doing the same.
func (b *listBudget) grow(n int) {
	if n <= 0 {
		return
	}
	b.mu.Lock()
	b.used += n
	b.mu.Unlock()
}

// admitLocked admits waiters in arrival order while the first one fits.
func (b *listBudget) admitLocked() {
	for e := b.waiters.Front(); e != nil; e = b.waiters.Front() {
		w := e.Value.(*listWaiter)
		if b.used+w.n > b.capacity() {
			return
		}
		b.used += w.n
		b.waiters.Remove(e)
		close(w.ready)
	}
}

// begin counts a LIST being served.
func (b *listBudget) begin() {
	b.mu.Lock()
	b.active++
	b.mu.Unlock()
}

// end counts a LIST done after handing out listed objects, and returns
// memory to the operating system once a burst of LISTs is over.
func (b *listBudget) end(ctx context.Context, listed int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.active--
	b.listed += listed
	b.maybeReturnMemoryLocked(klog.FromContext(ctx))
}

// maybeReturnMemoryLocked schedules a forced collection that returns free
// heap to the operating system when no LIST runs, enough objects were
// listed since the last one, and the last one is a minute old. Go's own
// scavenger returns memory only slowly, and only down to what the last
// collection's heap goal allows; after a burst nothing allocates, no
// collection runs, and the process would keep its peak size for minutes.
func (b *listBudget) maybeReturnMemoryLocked(logger klog.Logger) {
	if !b.limits.ReturnMemory || b.stopped || b.returnPending || b.active > 0 || b.listed < memoryReturnAfterObjects {
		return
	}
	b.returnPending = true
	wait := max(memoryReturnQuiet, time.Until(b.lastReturn.Add(memoryReturnInterval)))
	b.returnTimer = time.AfterFunc(wait, func() {
		b.mu.Lock()
		b.returnPending = false
		if b.active > 0 || b.stopped {
			// A new burst: its end schedules again.
			b.mu.Unlock()
			return
		}
		listed := b.listed
		b.listed, b.lastReturn = 0, time.Now()
		b.mu.Unlock()
		start := time.Now()
		b.freeOSMemory()
		logger.V(2).Info("Returned memory to the operating system after LISTs", "listedObjects", listed, "took", time.Since(start))
	})
}

// stop cancels a pending memory return and schedules no more.
func (b *listBudget) stop() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.stopped = true
	if b.returnTimer != nil {
		b.returnTimer.Stop()
	}
}

// listReservationKey carries a LIST's reservation from the HTTP handler,
// which releases it after the response is written, to the lister, which
// knows the LIST's size.
type listReservationKey struct{}

// listReservation is one LIST's share of the budget.
type listReservation struct {
	b *listBudget
	// held is the objects reserved; listed the objects the LIST returned.
	held, listed int
	// flight is the shared answer this LIST leads, if any.
	flight *flightStart
}

func reservationFrom(ctx context.Context) *listReservation {
	r, _ := ctx.Value(listReservationKey{}).(*listReservation)
	return r
}

// reserve waits for an estimate of the LIST's size.
func (r *listReservation) reserve(ctx context.Context, estimate int) error {
	n, err := r.b.acquire(ctx, estimate)
	r.held += n
	return err
}

// settle turns the estimate into the LIST's real size: the excess goes
// back at once, a shortfall is taken without waiting (the objects are in
// memory already).
func (r *listReservation) settle(listed int) {
	r.listed = listed
	if r.b.capacity() <= 0 {
		return
	}
	want := min(listed, r.b.capacity())
	switch {
	case want < r.held:
		r.b.release(r.held - want)
	case want > r.held:
		r.b.grow(want - r.held)
	}
	r.held = want
}

// done releases the reservation after the response is written.
func (r *listReservation) done(ctx context.Context) {
	r.b.release(r.held)
	r.held = 0
	r.b.end(ctx, r.listed)
}
