package client

import (
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// freshness records what an informer's ListerWatcher has observed, so callers
// can tell how current the informer's view is: kcp's cache client cannot, and
// a consumer reading a partition that stopped updating learns nothing.
type freshness struct {
	clock clock.PassiveClock

	mu sync.Mutex
	// lastSync is when the last complete list returned.
	lastSync time.Time
	// openWatches counts watches opened and not yet stopped. The reflector
	// holds at most one, but a count stays right if an old watch is stopped
	// after its replacement opened.
	openWatches int
}

func newFreshness(c clock.PassiveClock) *freshness {
	return &freshness{clock: c}
}

// listed records a complete, successful list.
func (f *freshness) listed() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lastSync = f.clock.Now()
}

// watchOpened records an established watch and returns the function that
// records its end; calling that more than once has no further effect.
func (f *freshness) watchOpened() func() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.openWatches++
	var once sync.Once
	return func() {
		once.Do(func() {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.openWatches--
		})
	}
}

// get returns the last sync time and whether a watch is established.
func (f *freshness) get() (time.Time, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lastSync, f.openWatches > 0
}
