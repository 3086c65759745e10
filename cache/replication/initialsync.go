package replication

import (
	"context"
	"sync"
	"time"

	"k8s.io/klog/v2"
)

// initialSync tracks the first full convergence: the keys found on either
// side at start-up that have not yet been reconciled successfully.
type initialSync struct {
	doneCh chan struct{}

	mu      sync.Mutex
	pending map[Key]struct{}
	total   int
	started time.Time
	closed  bool
}

func newInitialSync() *initialSync {
	return &initialSync{doneCh: make(chan struct{})}
}

// begin starts tracking keys; with none, the initial sync is done at once.
func (s *initialSync) begin(keys map[Key]struct{}, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pending, s.total, s.started = keys, len(keys), now
	s.closeIfDone()
}

// finished records a successful reconcile of k.
func (s *initialSync) finished(k Key) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	delete(s.pending, k)
	s.closeIfDone()
}

// closeIfDone closes doneCh once nothing is pending; mu must be held.
func (s *initialSync) closeIfDone() {
	if !s.closed && s.pending != nil && len(s.pending) == 0 {
		s.closed = true
		close(s.doneCh)
	}
}

// progress returns how many keys are done, of how many, since when.
func (s *initialSync) progress() (done, total int, started time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.total - len(s.pending), s.total, s.started
}

// enqueueAll queues the key of every object on either side, so the first
// pass converges fully: a local object without a copy gets one, and a copy
// without a local object (deleted while the shard was down) is deleted. The
// handlers have queued the same keys from the informers' initial lists; the
// queue holds each key once.
func (c *Controller) enqueueAll(ctx context.Context) {
	keys := map[Key]struct{}{}
	for _, gvr := range c.order {
		rs := c.resources[gvr]
		for _, obj := range rs.source.Informer.GetStore().List() {
			if k, err := keyFor(gvr, obj); err == nil && c.clusterSelected(k.Cluster) {
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
	c.initial.begin(keys, c.now())
	for k := range keys {
		c.queue.Add(k)
	}
	klog.FromContext(ctx).Info("Converging the shard's partition", "keys", len(keys))
}

// logProgress reports the initial sync while it runs, so a shard with many
// objects shows that it is getting somewhere, and says when it is done.
func (c *Controller) logProgress(ctx context.Context) {
	logger := klog.FromContext(ctx)
	ticker := time.NewTicker(c.progressInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.initial.doneCh:
			_, total, started := c.initial.progress()
			logger.Info("Initial replication complete", "keys", total, "duration", c.now().Sub(started).Round(time.Millisecond))
			return
		case <-ticker.C:
			done, total, started := c.initial.progress()
			logger.Info("Initial replication in progress", "done", done, "total", total, "queued", c.queue.Len(), "elapsed", c.now().Sub(started).Round(time.Second))
		}
	}
}
