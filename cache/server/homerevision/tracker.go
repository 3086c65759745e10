package homerevision

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/klog/v2"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

const (
	// initPageSize bounds each keys-only range read at initialisation.
	// etcd counts what remains after a page by visiting every key to the
	// end of the range (treeIndex.Revisions,
	// go.etcd.io/etcd/server/v3/storage/mvcc/index.go), and the range is
	// the whole prefix: n keys cost n²/(2×page) index visits. At 250,000
	// keys, pages of 1,000 made 31 M visits, a fifth of a restart's CPU
	// beside the watch caches' fill; pages of 10,000 make 3.1 M, and hold
	// 10,000 values (etcd reads them even for keys only) in etcd at once.
	initPageSize = 10000
	// progressRetryInterval is how often a waiting barrier asks the watch
	// for progress again: etcd defers a progress request while the watch is
	// catching up, and a request can be lost to a reconnection.
	progressRetryInterval = 250 * time.Millisecond
	// The delay before re-initialising after a failure, doubling up to the
	// maximum while failures repeat.
	minRetryDelay = 100 * time.Millisecond
	maxRetryDelay = 5 * time.Second
)

// ErrNotReady is returned while the tracker has not initialised.
var ErrNotReady = errors.New("the home revision tracker has not read the cache's etcd yet")

// key is one partition's objects of one type; shard is never the wildcard.
type key struct {
	shard string
	gr    schema.GroupResource
}

// Tracker records, per shard and group/resource, the etcd revision of the
// last change to the cache's objects, from one etcd watch over the storage
// prefix. Its one goroutine is Run; Revision and Known are safe to call
// concurrently with it, before it starts and after it returned.
type Tracker struct {
	client *clientv3.Client
	// pageSize is initPageSize but in tests.
	pageSize int64
	// root is the storage prefix with one trailing "/".
	root string
	// watcher is the tracker's own, so that a progress request reaches its
	// watch and no one else's.
	watcher clientv3.Watcher

	mu sync.Mutex
	// ready is set by the first initialisation.
	ready bool
	// floor is the revision of the last initialisation: deletions before it
	// are not known one by one, so no answer is lower.
	floor int64
	// processed is the revision up to which every change has been applied.
	processed int64
	last      map[key]int64
	// lastByType is the maximum of last over shards, for the wildcard.
	lastByType map[schema.GroupResource]int64
	// advanced is closed and replaced whenever processed moves or ready is
	// set, waking barriers.
	advanced chan struct{}
}

// NewTracker returns a tracker of the objects below prefix in client's
// etcd. It does nothing until Run.
func NewTracker(client *clientv3.Client, prefix string) *Tracker {
	return &Tracker{
		client:     client,
		pageSize:   initPageSize,
		root:       strings.TrimSuffix(prefix, "/") + "/",
		watcher:    clientv3.NewWatcher(client),
		last:       map[key]int64{},
		lastByType: map[schema.GroupResource]int64{},
		advanced:   make(chan struct{}),
	}
}

// Run initialises the tracker and follows etcd until ctx ends. After a
// watch failure (a compaction past the watch's revision, a member without a
// leader) it initialises again, after a delay that grows while failures
// repeat; answers never go down meanwhile. Run at most once: it closes the
// tracker's watcher when it returns, after which barriers wait in vain
// (until their context ends).
func (t *Tracker) Run(ctx context.Context) {
	logger := klog.FromContext(ctx).WithName("home-revision")
	ctx = klog.NewContext(ctx, logger)
	defer func() { _ = t.watcher.Close() }()
	delay := minRetryDelay
	for ctx.Err() == nil {
		rev, err := t.initialise(ctx)
		if err == nil {
			logger.V(2).Info("Following the cache's etcd for home revisions", "revision", rev)
			err = t.follow(ctx, rev)
			if t.Processed() > rev {
				// The watch delivered something: the failure is not a
				// repeat of the last one.
				delay = minRetryDelay
			}
		}
		if ctx.Err() != nil {
			return
		}
		logger.Error(err, "Home revision tracking failed; initialising again", "delay", delay)
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
		delay = min(2*delay, maxRetryDelay)
	}
}

// initialise reads every key below the prefix at one revision, keys only,
// in pages, and makes that revision the floor of every answer.
func (t *Tracker) initialise(ctx context.Context) (int64, error) {
	end := clientv3.GetPrefixRangeEnd(t.root)
	last := map[key]int64{}
	var rev int64
	for from := t.root; ; {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithKeysOnly(), clientv3.WithLimit(t.pageSize)}
		if rev != 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		// The first page is a linearizable read at etcd's current
		// revision; the others read that same revision.
		resp, err := t.client.Get(ctx, from, opts...)
		if err != nil {
			return 0, fmt.Errorf("reading the keys below %s: %w", t.root, err)
		}
		if rev == 0 {
			rev = resp.Header.Revision
		}
		for _, kv := range resp.Kvs {
			if k, ok := t.parseKey(string(kv.Key)); ok {
				last[k] = max(last[k], kv.ModRevision)
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			break
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}

	t.mu.Lock()
	defer t.mu.Unlock()
	// A re-initialisation keeps what it knew: the floor is above it anyway,
	// and answers must not go down.
	for k, r := range last {
		t.last[k] = max(t.last[k], r)
		t.lastByType[k.gr] = max(t.lastByType[k.gr], r)
	}
	t.floor = max(t.floor, rev)
	t.processed = max(t.processed, rev)
	t.ready = true
	t.wakeLocked()
	return rev, nil
}

// follow applies the watch's events from rev+1 until it fails or ctx ends.
func (t *Tracker) follow(ctx context.Context, rev int64) error {
	// WithRequireLeader ends the watch of a member cut off from its
	// cluster, which would otherwise wait silently; Revision asks for
	// progress with the same metadata, which is how etcd's client finds
	// this watch's stream.
	watchCtx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for resp := range t.watcher.Watch(watchCtx, t.root, clientv3.WithPrefix(), clientv3.WithRev(rev+1), clientv3.WithProgressNotify()) {
		if err := resp.Err(); err != nil {
			return fmt.Errorf("watching %s: %w", t.root, err)
		}
		switch {
		case resp.IsProgressNotify():
			// Every change up to the header's revision has been sent.
			t.advance(resp.Header.Revision, nil)
		case len(resp.Events) > 0:
			t.advance(0, resp.Events)
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return fmt.Errorf("the watch of %s ended", t.root)
}

// advance applies events and moves processed to the highest of their
// revisions and progress.
func (t *Tracker) advance(progress int64, events []*clientv3.Event) {
	t.mu.Lock()
	defer t.mu.Unlock()
	processed := max(t.processed, progress)
	for _, ev := range events {
		// A deletion's ModRevision is the revision of the deletion.
		rev := ev.Kv.ModRevision
		processed = max(processed, rev)
		if k, ok := t.parseKey(string(ev.Kv.Key)); ok {
			t.last[k] = max(t.last[k], rev)
			t.lastByType[k.gr] = max(t.lastByType[k.gr], rev)
		}
	}
	if processed > t.processed {
		t.processed = processed
		t.wakeLocked()
	}
}

func (t *Tracker) wakeLocked() {
	close(t.advanced)
	t.advanced = make(chan struct{})
}

// parseKey reads <group>/<resource>/<shard>/<cluster>/<rest> below root.
func (t *Tracker) parseKey(k string) (key, bool) {
	rest, ok := strings.CutPrefix(k, t.root)
	if !ok {
		return key{}, false
	}
	parts := strings.SplitN(rest, "/", 5)
	if len(parts) != 5 {
		return key{}, false
	}
	for _, p := range parts[1:] {
		if p == "" {
			return key{}, false
		}
	}
	return key{shard: parts[2], gr: schema.GroupResource{Group: parts[0], Resource: parts[1]}}, true
}

// Processed is the revision up to which the tracker has applied every
// change below the prefix; 0 before it initialised.
func (t *Tracker) Processed() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.processed
}

// Snapshot returns, without waiting, the revision up to which every change
// has been processed and the last change of every partition and type the
// tracker knows of (never below its floor); ok is false before it
// initialised.
func (t *Tracker) Snapshot() (processed int64, partitions []kcpcache.PartitionRevision, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, rev := range t.last {
		partitions = append(partitions, kcpcache.PartitionRevision{Shard: k.shard, Resource: k.gr.String(), Revision: max(t.floor, rev)})
	}
	return t.processed, partitions, t.ready
}

// Known answers the revision of the last change to shard's objects of gr
// (shard kcpcache.Wildcard: of any shard) that the tracker has processed,
// and never less than its floor, without waiting; ok is false before it
// initialised.
func (t *Tracker) Known(shard string, gr schema.GroupResource) (rev int64, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.knownLocked(shard, gr), t.ready
}

func (t *Tracker) knownLocked(shard string, gr schema.GroupResource) int64 {
	if shard == kcpcache.Wildcard {
		return max(t.floor, t.lastByType[gr])
	}
	return max(t.floor, t.last[key{shard: shard, gr: gr}])
}

// Revision answers as Known, after a barrier: it reads etcd's current
// revision with a linearizable request and waits until the watch has
// processed every change up to it, so the answer covers every write etcd
// acknowledged before the call. It waits at most until ctx ends, also for
// the tracker to initialise (then ErrNotReady).
func (t *Tracker) Revision(ctx context.Context, shard string, gr schema.GroupResource) (int64, error) {
	// A single-key read (the prefix itself, which holds no object) is
	// linearizable by default and cheap; its header carries the revision.
	resp, err := t.client.Get(ctx, t.root)
	if err != nil {
		return 0, fmt.Errorf("reading etcd's current revision: %w", err)
	}
	target := resp.Header.Revision
	progressCtx := clientv3.WithRequireLeader(ctx)
	requested := false
	var retry <-chan time.Time
	for {
		t.mu.Lock()
		ready, processed, advanced := t.ready, t.processed, t.advanced
		rev := t.knownLocked(shard, gr)
		t.mu.Unlock()
		if ready && processed >= target {
			return rev, nil
		}
		if ready && !requested {
			// A progress notification arrives once the watch has sent
			// everything up to etcd's revision; without one the barrier
			// would wait for the next write or the periodic notification.
			if err := t.watcher.RequestProgress(progressCtx); err != nil {
				klog.FromContext(ctx).V(4).Info("Requesting watch progress failed", "err", err)
			}
			requested, retry = true, time.After(progressRetryInterval)
		}
		select {
		case <-advanced:
		case <-retry:
			requested = false
		case <-ctx.Done():
			if !ready {
				return 0, fmt.Errorf("%w: %w", ErrNotReady, context.Cause(ctx))
			}
			return 0, fmt.Errorf("the tracker processed revision %d, not yet etcd's %d: %w", processed, target, context.Cause(ctx))
		}
	}
}
