package replication

import (
	"context"
	"strconv"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/klog/v2"
)

// Status is what the controller tells about its partition, for the shard's
// heartbeat.
type Status struct {
	// Converged is true when a full convergence has finished in the cache's
	// current epoch and no key is pending since.
	Converged bool
	// PendingKeys counts keys with a change not yet replicated.
	PendingKeys int
	// Epoch is the cache epoch of the last full convergence; EpochKnown is
	// false before the first.
	Epoch      string
	EpochKnown bool
	// OriginRegressions counts copies found recording a newer origin
	// resourceVersion than the shard's object (the shard went back in time).
	OriginRegressions int64
	// Resources has one entry per replicated type, in configuration order.
	Resources []ResourceStatus
}

// ResourceStatus is one replicated type in a Status.
type ResourceStatus struct {
	GVR schema.GroupVersionResource
	// Objects counts the copies in the partition, as the controller's cache
	// informer sees them.
	Objects int64
	// NewestOriginResourceVersion is the highest origin resourceVersion of
	// an object whose copy a reconcile confirmed since the controller
	// started; "" before the first.
	NewestOriginResourceVersion string
}

// Status returns the controller's current state. It is cheap: a few locks,
// no requests.
func (c *Controller) Status() Status {
	epoch, ok, running := c.initial.state()
	st := Status{
		PendingKeys:       c.pending.len(),
		Epoch:             epoch,
		EpochKnown:        ok,
		OriginRegressions: c.regressions.Load(),
	}
	current, seen := c.cacheClient.Epochs().Current()
	st.Converged = ok && !running && st.PendingKeys == 0 && (!seen || current == epoch)
	for _, gvr := range c.order {
		rs := c.resources[gvr]
		st.Resources = append(st.Resources, ResourceStatus{GVR: gvr, Objects: rs.copies.Load(), NewestOriginResourceVersion: rs.newest.get()})
	}
	return st
}

// newestVersion keeps the highest origin resourceVersion seen. kcp's
// resourceVersions are etcd revisions, decimal integers; others are not
// ordered and are ignored.
type newestVersion struct {
	mu sync.Mutex
	rv uint64
}

func (n *newestVersion) observe(rv string) {
	v, err := strconv.ParseUint(rv, 10, 64)
	if err != nil {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.rv = max(n.rv, v)
}

func (n *newestVersion) get() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.rv == 0 {
		return ""
	}
	return strconv.FormatUint(n.rv, 10)
}

// epochPollInterval is how often watchEpoch looks whether the cache
// informers have listed in a new epoch yet.
const epochPollInterval = time.Second

// watchEpoch starts a full convergence whenever the cache announces another
// epoch than the last round ran in. It waits until every cache informer has
// listed in the new epoch (their watches refuse to resume across epochs, see
// client.Informer.ListEpoch), so that the round compares the shard with the
// cache's new contents, not with what the informers held before.
func (c *Controller) watchEpoch(ctx context.Context) {
	logger := klog.FromContext(ctx)
	ticker := time.NewTicker(epochPollInterval)
	defer ticker.Stop()
	epochs := c.cacheClient.Epochs()
	for {
		changed := epochs.Changed()
		current, seen := epochs.Current()
		if seen && current != c.initial.roundEpoch() && c.informersListedIn(current) {
			logger.Info("The cache's epoch changed: its data may have gone back in time; converging the partition in full", "previousEpoch", c.initial.roundEpoch(), "cacheEpoch", current)
			epochChangesTotal.Inc()
			c.enqueueAll(ctx, current)
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		case <-ticker.C:
		}
	}
}

// epochLister is an informer that knows the epoch of its last list, as
// client.Informer does.
type epochLister interface{ ListEpoch() (string, bool) }

// listEpoch returns the epoch every cache informer last listed in, or ""
// and false when they disagree (one has not relisted after a change yet).
// An informer that tracks no epochs (a host's own informer) is not asked:
// it relists when its resourceVersion is refused, and the round's
// repairs follow its events.
func (c *Controller) listEpoch() (string, bool) {
	epoch, first := "", true
	for _, gvr := range c.order {
		inf, ok := interface{}(c.resources[gvr].cacheInformer).(epochLister)
		if !ok {
			continue
		}
		e, listed := inf.ListEpoch()
		if !listed || (!first && e != epoch) {
			return "", false
		}
		epoch, first = e, false
	}
	if first {
		// No informer tracks epochs: take the client's.
		epoch, _ = c.cacheClient.Epochs().Current()
	}
	return epoch, true
}

func (c *Controller) informersListedIn(epoch string) bool {
	e, ok := c.listEpoch()
	return ok && e == epoch
}
