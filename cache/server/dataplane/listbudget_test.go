package dataplane

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
)

// waitFor polls cond until it holds, failing the test after a generous
// deadline.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return cond(), nil
	})
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func (b *listBudget) state() (used, waiting int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used, b.waiters.Len()
}

func TestListBudgetAdmitsBySizeInArrivalOrder(t *testing.T) {
	ctx := context.Background()
	b := newListBudget(ListLimits{MaxObjectsInFlight: 100, WaitTimeout: time.Hour})

	// Larger than the whole budget: runs alone rather than never.
	if n, err := b.acquire(ctx, 1000); err != nil || n != 100 {
		t.Fatalf("a LIST larger than the budget: %d, %v; want the whole budget", n, err)
	}
	// Small LISTs do not queue behind large ones.
	if n, err := b.acquire(ctx, 1); err != nil || n != 1 {
		t.Fatalf("a small LIST: %d, %v; want it admitted at once", n, err)
	}
	b.release(1)

	var first, second atomic.Bool
	go func() {
		if _, err := b.acquire(ctx, 60); err == nil {
			first.Store(true)
		}
	}()
	waitFor(t, "the first LIST waiting", func() bool { _, w := b.state(); return w == 1 })
	go func() {
		if _, err := b.acquire(ctx, 50); err == nil {
			second.Store(true)
		}
	}()
	waitFor(t, "the second LIST waiting", func() bool { _, w := b.state(); return w == 2 })

	b.release(100)
	waitFor(t, "the first LIST admitted", first.Load)
	if used, waiting := b.state(); second.Load() || used != 60 || waiting != 1 {
		t.Fatalf("after the first: second admitted %v, used %d, waiting %d; want 60 used and the second (50) still waiting", second.Load(), used, waiting)
	}
	b.release(60)
	waitFor(t, "the second LIST admitted", second.Load)
}

func TestListBudgetRefusesAfterTheWait(t *testing.T) {
	ctx := context.Background()
	b := newListBudget(ListLimits{MaxObjectsInFlight: 100, WaitTimeout: time.Millisecond})
	if _, err := b.acquire(ctx, 100); err != nil {
		t.Fatal(err)
	}
	_, err := b.acquire(ctx, 50)
	if !apierrors.IsTooManyRequests(err) {
		t.Fatalf("a LIST that waited too long: %v; want 429", err)
	}
	if delay, ok := apierrors.SuggestsClientDelay(err); !ok || delay <= 0 {
		t.Errorf("the 429 suggests no delay: %v", err)
	}
	if used, waiting := b.state(); used != 100 || waiting != 0 {
		t.Errorf("after the refusal: used %d, waiting %d; want 100 and none", used, waiting)
	}
	b.release(100)
	if _, err := b.acquire(ctx, 50); err != nil {
		t.Errorf("after the release: %v", err)
	}
}

func TestReservationSettlesOnTheRealSize(t *testing.T) {
	ctx := context.Background()
	b := newListBudget(ListLimits{MaxObjectsInFlight: 100, WaitTimeout: time.Hour})
	r := &listReservation{b: b}
	b.begin()
	if err := r.reserve(ctx, 100); err != nil {
		t.Fatal(err)
	}
	r.settle(30)
	if used, _ := b.state(); used != 30 {
		t.Errorf("after settling on 30 of 100 reserved: used %d", used)
	}
	r.settle(500)
	if used, _ := b.state(); used != 100 {
		t.Errorf("after settling on more than the budget: used %d, want the budget", used)
	}
	r.done(ctx)
	if used, _ := b.state(); used != 0 {
		t.Errorf("after the LIST: used %d", used)
	}
}

func TestMemoryIsReturnedAfterABurstOfLists(t *testing.T) {
	ctx := context.Background()
	var returned atomic.Int32
	b := newListBudget(ListLimits{ReturnMemory: true})
	b.freeOSMemory = func() { returned.Add(1) }

	b.begin()
	b.end(ctx, memoryReturnAfterObjects-1)
	b.begin()
	b.end(ctx, 1)
	waitFor(t, "memory returned after the burst", func() bool { return returned.Load() == 1 })
	b.mu.Lock()
	listed := b.listed
	b.mu.Unlock()
	if listed != 0 {
		t.Errorf("listed objects after the return: %d", listed)
	}
}
