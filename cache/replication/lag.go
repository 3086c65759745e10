package replication

import (
	"sync"
	"time"
)

// lagTracker measures replication lag: for each key, when the controller
// first observed a local change not yet replicated. A reconcile claims the
// time before it reads the local object, so a change observed while it runs
// starts a new measurement instead of being credited to a write that did not
// include it.
type lagTracker struct {
	mu    sync.Mutex
	since map[Key]time.Time
}

func newLagTracker() *lagTracker {
	return &lagTracker{since: map[Key]time.Time{}}
}

// observed records a local change of k at t, unless an earlier one is still
// waiting: lag runs from the oldest change a write catches up with.
func (l *lagTracker) observed(k Key, t time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.since[k]; !ok {
		l.since[k] = t
	}
}

// claim takes k's pending observation, if any, for one reconcile.
func (l *lagTracker) claim(k Key) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	t, ok := l.since[k]
	delete(l.since, k)
	return t, ok
}

// unclaim gives a claimed observation back after a failed reconcile, keeping
// the earlier of it and any observed since.
func (l *lagTracker) unclaim(k Key, t time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if cur, ok := l.since[k]; !ok || t.Before(cur) {
		l.since[k] = t
	}
}

// pending returns how many keys have an unreplicated change; for tests.
func (l *lagTracker) pending() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.since)
}
