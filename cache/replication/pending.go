package replication

import "sync"

// pendingKeys counts the keys with a change the controller has not yet
// replicated: queued, being reconciled, or waiting for a retry. The work
// queue cannot tell: its length leaves out the keys in processing and those
// waiting out their backoff. Each key carries the generation of its last
// change, so a reconcile that began before a newer change does not clear it.
type pendingKeys struct {
	mu   sync.Mutex
	gen  map[Key]uint64
	next uint64
}

func newPendingKeys() *pendingKeys { return &pendingKeys{gen: map[Key]uint64{}} }

// add records a change of k.
func (p *pendingKeys) add(k Key) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.next++
	p.gen[k] = p.next
}

// claim returns k's generation as a reconcile starts.
func (p *pendingKeys) claim(k Key) uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.gen[k]
}

// done records a successful reconcile of k that started at generation g; a
// change since then keeps k pending.
func (p *pendingKeys) done(k Key, g uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if cur, ok := p.gen[k]; ok && cur == g {
		delete(p.gen, k)
	}
}

// len returns how many keys are pending.
func (p *pendingKeys) len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.gen)
}
