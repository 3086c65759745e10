package replication

import "sync"

// echoes remembers the resourceVersion of the copy each key's last write
// produced. The cache informer's event for that very write carries nothing
// the controller does not know, so it need not queue the key again: without
// this, every write costs a second reconcile, and after an initial sync of
// many objects a backlog of such echoes delays real changes.
//
// Only equality of resourceVersions is used, never their order. An echo that
// overtakes the write's response is not recognised and costs one reconcile;
// an expectation is consumed by the next event for its key either way, so
// the map holds at most one entry per key with a write in flight.
type echoes struct {
	mu sync.Mutex
	rv map[Key]string
}

func newEchoes() *echoes {
	return &echoes{rv: map[Key]string{}}
}

// wrote records that the controller's write left k's copy at rv.
func (e *echoes) wrote(k Key, rv string) {
	if rv == "" {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.rv[k] = rv
}

// isEcho reports whether an event showing k's copy at rv is the echo of the
// controller's own last write, and forgets the expectation.
func (e *echoes) isEcho(k Key, rv string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	expected, ok := e.rv[k]
	delete(e.rv, k)
	return ok && rv != "" && expected == rv
}
