package dataplane

import (
	"context"
	"errors"
	"testing"
	"time"

	"k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/storage"
	clocktesting "k8s.io/utils/clock/testing"
)

// countingStorage answers each Stats call with what the test sends on
// answers, or with ctx's error when ctx ends first; started receives every
// call as it starts.
type countingStorage struct {
	storage.Interface
	started chan struct{}
	answers chan error
}

func (s countingStorage) Stats(ctx context.Context) (storage.Stats, error) {
	s.started <- struct{}{}
	select {
	case err := <-s.answers:
		return storage.Stats{ObjectCount: 7}, err
	case <-ctx.Done():
		return storage.Stats{}, ctx.Err()
	}
}

func newCountingStore() (*registry.Store, countingStorage) {
	s := countingStorage{started: make(chan struct{}, 10), answers: make(chan error)}
	return &registry.Store{Storage: registry.DryRunnableStorage{Storage: s}}, s
}

func (c *objectCounts) counting(store *registry.Store) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.counts[store] != nil && c.counts[store].counting
}

// A LIST never waits for its type's count, which may wait for etcd's
// leader: it takes the count last made (none at first), the count is
// renewed in the background once objectCountTTL old, and a failed renewal
// keeps the count before it.
func TestObjectCountsNeverWaitForTheStorage(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Now())
	c := newObjectCounts(clk)
	defer c.stop()
	store, s := newCountingStore()

	if n, ok := c.get(store); ok {
		t.Fatalf("get before any count = %d, true; want none known", n)
	}
	<-s.started
	if n, ok := c.get(store); ok {
		t.Fatalf("get while the first count waits = %d, true; want none known", n)
	}
	s.answers <- nil
	waitFor(t, "the count ends", func() bool { return !c.counting(store) })
	if n, ok := c.get(store); !ok || n != 7 {
		t.Fatalf("get after the count = %d, %v; want 7, true", n, ok)
	}

	clk.SetTime(clk.Now().Add(objectCountTTL))
	if n, ok := c.get(store); !ok || n != 7 {
		t.Fatalf("get once the count is old = %d, %v; want the old count 7", n, ok)
	}
	<-s.started
	s.answers <- errors.New("etcdserver: request timed out")
	waitFor(t, "the renewal ends", func() bool { return !c.counting(store) })
	if n, ok := c.get(store); !ok || n != 7 {
		t.Fatalf("get after a failed renewal = %d, %v; want the last count 7", n, ok)
	}
}

// However long a count waits, it is the only one of its store.
func TestObjectCountsCountOneAtATime(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Now())
	c := newObjectCounts(clk)
	store, s := newCountingStore()
	c.get(store)
	<-s.started
	clk.SetTime(clk.Now().Add(10 * objectCountTTL))
	c.get(store)
	// Every count has started once stop returns.
	c.stop()
	if n := len(s.started); n != 0 {
		t.Fatalf("%d more counts started while the first waited", n)
	}
}

// stop ends the counts under way and waits for them; get starts none
// afterwards.
func TestObjectCountsStopEndsCountsUnderWay(t *testing.T) {
	c := newObjectCounts(clocktesting.NewFakePassiveClock(time.Now()))
	store, s := newCountingStore()
	c.get(store)
	<-s.started
	c.stop()
	if c.counting(store) {
		t.Fatal("a count is still under way after stop")
	}
	other, s2 := newCountingStore()
	c.get(other)
	if len(s2.started) != 0 || c.counting(other) {
		t.Fatal("a count started after stop")
	}
}
