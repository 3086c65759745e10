package replication

import (
	"context"
	"sync"
	"time"

	"k8s.io/klog/v2"
)

// convergence tracks full convergences of the partition: rounds in which
// every key found on either side is reconciled successfully. The first
// round runs at start-up; another runs whenever the cache's epoch changes
// (see Controller.watchEpoch), because then the cache's data may have gone
// back in time or vanished, and only a full pass proves the partition right.
type convergence struct {
	// doneCh is closed when the first round finishes.
	doneCh chan struct{}

	mu      sync.Mutex
	pending map[Key]struct{}
	total   int
	started time.Time
	// epoch is the cache epoch of the current (or last) round.
	epoch   string
	running bool
	// convergedEpoch is the epoch of the last round that finished, and
	// everConverged whether one has.
	convergedEpoch string
	everConverged  bool
}

func newConvergence() *convergence {
	return &convergence{doneCh: make(chan struct{})}
}

// begin starts a round over keys, in the cache epoch the cache informers
// listed in; with no keys, the round is done at once. A round still running
// is abandoned: the new one covers every key again.
func (s *convergence) begin(keys map[Key]struct{}, epoch string, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pending, s.total, s.started, s.epoch, s.running = keys, len(keys), now, epoch, true
	s.finishIfDone()
}

// finished records a successful reconcile of k.
func (s *convergence) finished(k Key) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.running {
		return
	}
	delete(s.pending, k)
	s.finishIfDone()
}

// finishIfDone ends the round once nothing is pending; mu must be held.
func (s *convergence) finishIfDone() {
	if !s.running || len(s.pending) > 0 {
		return
	}
	s.running = false
	s.convergedEpoch = s.epoch
	if !s.everConverged {
		s.everConverged = true
		close(s.doneCh)
	}
}

// progress returns how many keys of the current round are done, of how
// many, since when, and whether it is still running.
func (s *convergence) progress() (done, total int, started time.Time, running bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.total - len(s.pending), s.total, s.started, s.running
}

// roundEpoch returns the epoch of the running or last round.
func (s *convergence) roundEpoch() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.epoch
}

// state returns the epoch of the last finished round (ok false before the
// first) and whether a round is running.
func (s *convergence) state() (epoch string, ok, running bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.convergedEpoch, s.everConverged, s.running
}

// enqueueAll starts a round in epoch: it queues the key of every object on
// either side, so the pass converges fully: a local object without a copy
// gets one, and a copy without a local object (deleted while the shard was
// down) is deleted. The handlers have queued the same keys from the
// informers' lists; the queue holds each key once.
func (c *Controller) enqueueAll(ctx context.Context, epoch string) {
	keys := map[Key]struct{}{}
	for _, gvr := range c.order {
		rs := c.resources[gvr]
		for _, obj := range rs.source.Informer.GetStore().List() {
			if k, err := keyFor(gvr, obj); err == nil && c.clusterSelected(gvr, k.Cluster) {
				keys[k] = struct{}{}
			}
		}
		for _, obj := range rs.cacheInformer.GetStore().List() {
			if !inShard(obj, c.shard) {
				continue
			}
			if k, err := keyFor(gvr, obj); err == nil {
				keys[k] = struct{}{}
			}
		}
	}
	c.initial.begin(keys, epoch, c.now())
	for k := range keys {
		c.enqueue(k)
	}
	klog.FromContext(ctx).Info("Converging the shard's partition", "keys", len(keys), "cacheEpoch", epoch)
}

// logProgress reports each round while it runs, so a shard with many
// objects shows that it is getting somewhere, and says when it is done.
func (c *Controller) logProgress(ctx context.Context) {
	logger := klog.FromContext(ctx)
	ticker := time.NewTicker(c.progressInterval)
	defer ticker.Stop()
	reported := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		done, total, started, running := c.initial.progress()
		switch {
		case running:
			reported = false
			logger.Info("Replication convergence in progress", "done", done, "total", total, "queued", c.queue.Len(), "elapsed", c.now().Sub(started).Round(time.Second))
		case !reported && !started.IsZero():
			reported = true
			epoch, _, _ := c.initial.state()
			logger.Info("Replication converged in full", "keys", total, "duration", c.now().Sub(started).Round(time.Millisecond), "cacheEpoch", epoch)
		}
	}
}
