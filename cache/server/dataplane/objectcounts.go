package dataplane

import (
	"context"
	"sync"
	"time"

	"k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/utils/clock"
)

const (
	// objectCountTTL is how long a type's object count is reused before it
	// is counted again: counting reads every key of the type, too much to
	// do for every LIST of a storm.
	objectCountTTL = time.Second
	// objectCountTimeout bounds one count (etcd's own request timeout is
	// 7 s, which its client retries).
	objectCountTimeout = 10 * time.Second
	// maxCountedStores bounds the counts kept; a server serves tens of
	// types, more only while types come and go.
	maxCountedStores = 1024
)

// objectCounts keeps each store's object count, by which the LIST budget
// estimates a LIST before reading it. A LIST never waits for a count:
// counting asks etcd with a quorum read, which waits for the leader for as
// long as the request may last when there is none, and a member of an
// in-memory group whose peers just crashed does not know yet that it has
// none, while it must answer a resourceVersion read from its watch cache at
// once. So a LIST takes the count last made, and one older than
// objectCountTTL is renewed in the background, one count at a time per
// store; a failed count keeps the one before it.
type objectCounts struct {
	clock clock.PassiveClock
	// ctx ends at stop, ending the counts under way.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	counts  map[*registry.Store]*objectCount
	stopped bool
}

type objectCount struct {
	n     int
	known bool
	// started is when the last count started; counting is true until it
	// ended.
	started  time.Time
	counting bool
}

func newObjectCounts(clk clock.PassiveClock) *objectCounts {
	ctx, cancel := context.WithCancel(context.Background())
	return &objectCounts{clock: clk, ctx: ctx, cancel: cancel, counts: map[*registry.Store]*objectCount{}}
}

// get returns store's object count as last counted, false when none is
// known yet, and starts a new count when that one is older than
// objectCountTTL. It never waits for the storage.
func (c *objectCounts) get(store *registry.Store) (int, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cur := c.counts[store]
	if cur == nil {
		if len(c.counts) >= maxCountedStores {
			// Stores of types no longer served stay in the map until here.
			clear(c.counts)
		}
		cur = &objectCount{}
		c.counts[store] = cur
	}
	if !c.stopped && !cur.counting && (cur.started.IsZero() || c.clock.Since(cur.started) >= objectCountTTL) {
		cur.counting, cur.started = true, c.clock.Now()
		c.wg.Go(func() { c.count(store, cur) })
	}
	return cur.n, cur.known
}

// count counts store's objects into cur.
func (c *objectCounts) count(store *registry.Store, cur *objectCount) {
	ctx, cancel := context.WithTimeout(c.ctx, objectCountTimeout)
	defer cancel()
	stats, err := store.Storage.Stats(ctx)
	c.mu.Lock()
	defer c.mu.Unlock()
	cur.counting = false
	if err == nil {
		cur.n, cur.known = int(stats.ObjectCount), true
	}
}

// stop ends the counts under way and waits for them; none starts after it.
func (c *objectCounts) stop() {
	c.mu.Lock()
	c.stopped = true
	c.mu.Unlock()
	c.cancel()
	c.wg.Wait()
}
