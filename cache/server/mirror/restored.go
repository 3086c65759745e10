package mirror

import (
	"context"
	"sort"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/client"
)

// A home whose epoch changed has lost its data or gone back in it (a new
// etcd, a restored backup, an in-memory home that restarted): what it
// holds now may be older than the copies here. Mirroring it at once would
// take every reader of this cache back in time, deleting objects the shard
// still has and resurrecting ones it deleted. So the copies of every
// partition of that home are held as they are — served by stale reads,
// refused to consistent reads with ReasonHomeRestored — until the shard
// has converged its partition at the home again, which its heartbeat there
// says (spec.epoch is the home's new epoch and spec.converged is true).
// Only then does the mirror follow the home again, with a new list.
//
// A shard that writes no heartbeat (kcp's own replication) never says so;
// its partition is released once the origins its copies record show it
// whole again at the home (originconvergence.go), or at the latest after
// restoredHoldTimeout, and the log says which partitions were.
const (
	restoredHoldTimeout  = 10 * time.Minute
	releaseCheckInterval = 2 * time.Second
)

// ReasonHomeRestored: the home's epoch changed and the shard has not yet
// converged its partition there again; the copy here is held as it was.
const ReasonHomeRestored = "HomeRestored"

// holds are the partitions taken from a peer that are held after their
// home's epoch changed: the peer's own, and those it relays.
type holds struct {
	mu sync.Mutex
	// held maps a shard to its hold: since when, which home, and the home
	// epoch it waits to be converged in.
	held map[string]heldPartition
	// releasedIn maps a shard to the epoch it was released in: its copies
	// from the older epoch are being rewritten, not a reason to hold again.
	releasedIn map[string]string
	// released is closed and replaced whenever partitions are released,
	// so that the peer's streams list again and take them up.
	released chan struct{}
	// generation counts releases: a stream's list taken before the last
	// release skipped the released partitions, and does not make the
	// stream current (stream.pendingRelease).
	generation int64
}

// releaseGeneration returns the number of releases so far.
func (h *holds) releaseGeneration() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.generation
}

// heldPartition is one shard's hold.
type heldPartition struct {
	since       time.Time
	home, epoch string
}

func newHolds() *holds {
	return &holds{held: map[string]heldPartition{}, releasedIn: map[string]string{}, released: make(chan struct{})}
}

// isHeld reports whether shard's copies from the peer are held.
func (h *holds) isHeld(shard string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.held[shard]
	return ok
}

// anyHeld reports whether any partition of home taken from the peer is
// held.
func (h *holds) anyHeld(home string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, hp := range h.held {
		if hp.home == home {
			return true
		}
	}
	return false
}

// releasedChan is closed at the next release.
func (h *holds) releasedChan() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.released
}

// hold holds the partitions of shards, homed at home, waiting for epoch.
func (h *holds) hold(ctx context.Context, peer, home, epoch string, shards []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := time.Now()
	for _, s := range shards {
		if h.releasedIn[s] == epoch {
			continue
		}
		if hp, ok := h.held[s]; !ok {
			h.held[s] = heldPartition{since: now, home: home, epoch: epoch}
			klog.FromContext(ctx).Info("Holding the copies of a partition whose home changed epoch, until the shard converges there again",
				"peer", peer, "home", home, "shard", s, "homeEpoch", epoch)
			heldPartitions.WithLabelValues(peer).Inc()
		} else if hp.epoch != epoch {
			// A newer change of epoch: the partition waits for this one.
			hp.epoch = epoch
			h.held[s] = hp
		}
	}
}

// holdHome holds every partition known to be homed at home (the peer
// itself, or a home it relays), and shards, after home was found answering
// in epoch while copies here came from another.
func (p *source) holdHome(ctx context.Context, m *Mirror, home, epoch string, shards ...string) {
	claims, _ := m.homes.Known()
	for _, c := range claims {
		if c.Home == home {
			shards = append(shards, c.Shard)
		}
	}
	p.holds.hold(ctx, p.Name, home, epoch, shards)
}

// releaseLoop releases held partitions whose shard converged at the peer in
// its new epoch, or that were held too long, until ctx ends.
func (p *source) releaseLoop(ctx context.Context, local *client.ClusterClient) {
	ticker := time.NewTicker(releaseCheckInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		p.releaseConverged(ctx, local)
	}
}

func (p *source) releaseConverged(ctx context.Context, local *client.ClusterClient) {
	p.holds.mu.Lock()
	shards := make([]string, 0, len(p.holds.held))
	held := map[string]heldPartition{}
	for s, hp := range p.holds.held {
		shards = append(shards, s)
		held[s] = hp
	}
	p.holds.mu.Unlock()
	sort.Strings(shards)
	var release []string
	for _, shard := range shards {
		// A relay serves the shard's heartbeat and objects as the home
		// holds them: the same questions work through it.
		converged, err := p.convergedIn(ctx, shard, held[shard].epoch)
		switch {
		case err != nil:
			klog.FromContext(ctx).V(2).Info("Could not read a held partition's heartbeat at its home", "peer", p.Name, "shard", shard, "err", err)
		case converged:
			release = append(release, shard)
		case p.wholeByOrigin(ctx, local, shard, held[shard].home):
			release = append(release, shard)
		case time.Since(held[shard].since) > restoredHoldTimeout:
			klog.FromContext(ctx).Info("Releasing a held partition without its shard's confirmation: the hold timed out",
				"peer", p.Name, "shard", shard, "timeout", restoredHoldTimeout)
			release = append(release, shard)
		}
	}
	if len(release) == 0 {
		return
	}
	p.holds.mu.Lock()
	var released []string
	for _, s := range release {
		if hp, ok := p.holds.held[s]; ok && hp.epoch == held[s].epoch {
			delete(p.holds.held, s)
			p.holds.releasedIn[s] = hp.epoch
			heldPartitions.WithLabelValues(p.Name).Dec()
			released = append(released, s)
		}
	}
	if len(released) > 0 {
		close(p.holds.released)
		p.holds.released = make(chan struct{})
		p.holds.generation++
		gen := p.holds.generation
		// The streams skipped the held partitions' events while they were
		// held and advanced past them: until they list again, having
		// applied a home revision proves nothing of those partitions.
		p.mu.Lock()
		for _, s := range p.streams {
			s.needRelist(gen)
		}
		p.mu.Unlock()
	}
	p.holds.mu.Unlock()
	if len(released) > 0 {
		klog.FromContext(ctx).Info("Released partitions whose shard converged at its home again", "peer", p.Name, "shards", released)
	}
}

// wholeByOrigin reports whether shard's partition is whole again at the
// peer by the origins its copies record (originconvergence.go), logging why
// not.
func (p *source) wholeByOrigin(ctx context.Context, local *client.ClusterClient, shard, home string) bool {
	whole, why, err := p.wholeAtHome(ctx, local, shard, home)
	switch {
	case err != nil:
		klog.FromContext(ctx).V(2).Info("Could not compare a held partition with its home", "peer", p.Name, "shard", shard, "err", err)
	case whole:
		klog.FromContext(ctx).Info("A held partition is whole again at its home by its objects' origins", "peer", p.Name, "shard", shard)
	default:
		klog.FromContext(ctx).V(2).Info("A held partition is not whole at its home yet", "peer", p.Name, "shard", shard, "why", why)
	}
	return whole
}

// convergedIn reads shard's heartbeat at the peer: converged in epoch?
func (p *source) convergedIn(ctx context.Context, shard, epoch string) (bool, error) {
	u, err := p.Client().Cluster(shard, kcpcache.HeartbeatCluster).Resource(kcpcache.HeartbeatResource).Get(ctx, shard, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, nil
	} else if err != nil {
		return false, err
	}
	var hb kcpcache.Heartbeat
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &hb); err != nil {
		return false, err
	}
	return hb.Spec.Converged && hb.Spec.Epoch == epoch, nil
}
