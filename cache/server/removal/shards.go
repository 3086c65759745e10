package removal

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

// ShardPurgerConfig is what a ShardPurger needs.
type ShardPurgerConfig struct {
	// Client reaches the etcd the cache stores in.
	Client *clientv3.Client
	// Prefix is the cache's etcd key prefix (--etcd-prefix).
	Prefix string
	// Retention is how long a heartbeat may be expired before its shard's
	// partition is purged; zero never purges by expiry.
	Retention time.Duration
	// Interval is how often heartbeats are checked.
	Interval time.Duration
	// BatchSize bounds the keys deleted per transaction; zero means
	// DefaultBatchSize.
	BatchSize int
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// request is one shard to purge and why.
type request struct {
	shard, reason string
}

// ShardPurger purges the partitions of shards that are gone. It acts on two
// signals: a heartbeat expired for longer than the retention (checked every
// interval), and the deletion of the shard's Shard object in the cache
// (followed with an etcd watch from the purger's start; a deletion while no
// cache server ran is not seen, and the expiry rule remains).
type ShardPurger struct {
	cfg   ShardPurgerConfig
	queue workqueue.TypedRateLimitingInterface[request]

	mu sync.Mutex
	// purging holds the shards whose partitions this purger is deleting
	// now, and ownDeletes the revisions at which it deleted Shard objects
	// (until the watch has passed them): such a deletion is a purge, not
	// kcp's decision that a shard is gone.
	purging    map[string]bool
	ownDeletes map[int64]bool
}

// NewShardPurger returns a purger; Run starts it.
func NewShardPurger(cfg ShardPurgerConfig) *ShardPurger {
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = DefaultBatchSize
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	registerMetrics()
	return &ShardPurger{
		cfg: cfg,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[request](),
			workqueue.TypedRateLimitingQueueConfig[request]{Name: "shard-purger"}),
		purging:    map[string]bool{},
		ownDeletes: map[int64]bool{},
	}
}

// Run works until ctx is done and returns when every goroutine it started
// has.
func (p *ShardPurger) Run(ctx context.Context) {
	logger := klog.FromContext(ctx).WithName("shard-purger")
	ctx = klog.NewContext(ctx, logger)
	var wg sync.WaitGroup
	wg.Go(func() {
		<-ctx.Done()
		p.queue.ShutDown()
	})
	wg.Go(func() { p.watchShardObjects(ctx) })
	if p.cfg.Retention > 0 {
		wg.Go(func() {
			ticker := time.NewTicker(p.cfg.Interval)
			defer ticker.Stop()
			for {
				if err := p.scanHeartbeats(ctx); err != nil && ctx.Err() == nil {
					logger.Error(err, "Checking shard heartbeats")
				}
				select {
				case <-ctx.Done():
					return
				case <-ticker.C:
				}
			}
		})
	}
	logger.Info("Purging the partitions of shards that are gone", "retention", p.cfg.Retention, "interval", p.cfg.Interval)
	for p.processNext(ctx) {
	}
	wg.Wait()
}

// scanHeartbeats queues every shard whose heartbeat has been expired for
// longer than the retention.
func (p *ShardPurger) scanHeartbeats(ctx context.Context) error {
	tp := typePrefix(p.cfg.Prefix, kcpcache.HeartbeatResource.GroupResource())
	resp, err := p.cfg.Client.Get(ctx, tp, clientv3.WithPrefix())
	if err != nil {
		return err
	}
	now := p.cfg.Now()
	for _, kv := range resp.Kvs {
		k, ok := parseObjectKey(tp, string(kv.Key))
		if !ok || k.cluster != kcpcache.HeartbeatCluster || k.rest != k.shard || kcpcache.IsReservedName(k.shard) {
			continue
		}
		if decodeHeartbeat(kv.Value, kv.ModRevision).expiredLongerThan(now, p.cfg.Retention) {
			p.queue.Add(request{shard: k.shard, reason: ReasonHeartbeatExpired})
		}
	}
	return nil
}

// watchShardObjects queues the shard named by every Shard object deleted
// from the cache, until ctx is done.
func (p *ShardPurger) watchShardObjects(ctx context.Context) {
	logger := klog.FromContext(ctx)
	tp := typePrefix(p.cfg.Prefix, ShardResource)
	var rev int64
	for ctx.Err() == nil {
		if rev == 0 {
			resp, err := p.cfg.Client.Get(ctx, tp, clientv3.WithPrefix(), clientv3.WithCountOnly())
			if err != nil {
				logger.Error(err, "Reading etcd's revision to watch Shard objects from")
				p.wait(ctx, time.Second)
				continue
			}
			rev = resp.Header.Revision + 1
		}
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		for resp := range p.cfg.Client.Watch(wctx, tp, clientv3.WithPrefix(), clientv3.WithRev(rev), clientv3.WithFilterPut()) {
			if err := resp.Err(); err != nil {
				if errors.Is(err, context.Canceled) {
					break
				}
				logger.Info("Watch of Shard objects ended; watching again", "err", err)
				if resp.CompactRevision != 0 {
					// Deletions between rev and the compaction are lost;
					// heartbeats still expire for those shards.
					logger.Info("Missed Shard deletions before an etcd compaction", "from", rev, "compacted", resp.CompactRevision)
					rev = resp.CompactRevision
				}
				break
			}
			p.shardObjectsDeleted(ctx, tp, resp.Events)
			if n := len(resp.Events); n > 0 {
				// Resume after the last event seen, never later: a
				// deletion is seen once, and none is skipped.
				rev = resp.Events[n-1].Kv.ModRevision + 1
			}
		}
		cancel()
		p.wait(ctx, 100*time.Millisecond)
	}
}

// shardObjectsDeleted queues the shards whose Shard objects these deletion
// events removed, unless the deletion was a purge: a range of several keys
// in one revision (kcp deletes one object at a time), in a partition this
// purger is deleting, or in a partition whose own heartbeat has expired
// beyond the retention (another cache server purging it).
func (p *ShardPurger) shardObjectsDeleted(ctx context.Context, tp string, events []*clientv3.Event) {
	logger := klog.FromContext(ctx)
	perRevision := map[int64]int{}
	for _, ev := range events {
		perRevision[ev.Kv.ModRevision]++
	}
	for _, ev := range events {
		if ev.Type != mvccpb.DELETE {
			continue
		}
		k, ok := parseObjectKey(tp, string(ev.Kv.Key))
		if !ok || k.cluster != ShardObjectCluster || strings.Contains(k.rest, "/") || kcpcache.IsReservedName(k.rest) {
			continue
		}
		name := k.rest
		if perRevision[ev.Kv.ModRevision] > 1 || p.isOwnDelete(k.shard, ev.Kv.ModRevision) || p.expiredBeyondRetention(ctx, k.shard) {
			logger.V(2).Info("A Shard object was removed by a purge; not a shard deletion", "shard", name, "partition", k.shard)
			continue
		}
		logger.Info("Shard object deleted from the cache; purging the shard's partition", "shard", name)
		p.queue.Add(request{shard: name, reason: ReasonShardDeleted})
	}
}

func (p *ShardPurger) expiredBeyondRetention(ctx context.Context, shard string) bool {
	if p.cfg.Retention == 0 {
		return false
	}
	hb, err := p.heartbeat(ctx, shard)
	return err == nil && hb.expiredLongerThan(p.cfg.Now(), p.cfg.Retention)
}

func (p *ShardPurger) heartbeat(ctx context.Context, shard string) (heartbeat, error) {
	resp, err := p.cfg.Client.Get(ctx, heartbeatKey(p.cfg.Prefix, shard))
	if err != nil || len(resp.Kvs) == 0 {
		return heartbeat{}, err
	}
	return decodeHeartbeat(resp.Kvs[0].Value, resp.Kvs[0].ModRevision), nil
}

func (p *ShardPurger) processNext(ctx context.Context) bool {
	req, quit := p.queue.Get()
	if quit {
		return false
	}
	defer p.queue.Done(req)
	if err := p.purge(ctx, req); err != nil {
		if ctx.Err() != nil {
			return true
		}
		partitionPurges.WithLabelValues(req.reason, "error").Inc()
		klog.FromContext(ctx).Error(err, "Purging a shard's partition; will retry", "shard", req.shard, "reason", req.reason)
		p.queue.AddRateLimited(req)
		return true
	}
	p.queue.Forget(req)
	return true
}

// purge decides again, with the heartbeat as it is now, and purges.
func (p *ShardPurger) purge(ctx context.Context, req request) error {
	logger := klog.FromContext(ctx).WithValues("shard", req.shard, "reason", req.reason)
	if err := kcpcache.ValidateShardName(req.shard); err != nil || kcpcache.IsReservedName(req.shard) {
		// Names come from etcd keys and Shard objects; the system
		// partition and anything that is not a shard are never purged.
		logger.Info("Not purging: not the name of a shard's partition", "err", err)
		return nil
	}
	hb, err := p.heartbeat(ctx, req.shard)
	if err != nil {
		return err
	}
	now := p.cfg.Now()
	switch req.reason {
	case ReasonHeartbeatExpired:
		if !hb.expiredLongerThan(now, p.cfg.Retention) {
			logger.V(2).Info("Not purging: the heartbeat is no longer expired beyond the retention", "heartbeat", hb)
			return nil
		}
	case ReasonShardDeleted:
		if hb.fresh(now) {
			logger.Info("Not purging a deleted shard whose heartbeat is fresh: it still pushes", "heartbeat", hb)
			return nil
		}
	}
	p.setPurging(req.shard, true)
	defer p.setPurging(req.shard, false)
	logger.Info("Purging the partition of a shard that is gone", "heartbeat", hb, "retention", p.cfg.Retention)
	shardType := typePrefix(p.cfg.Prefix, ShardResource)
	res, err := purgePartition(ctx, p.cfg.Client, p.cfg.Prefix, req.shard, hb.modRevision, p.cfg.BatchSize, func(tp string, rev int64) {
		if tp == shardType {
			p.mu.Lock()
			p.ownDeletes[rev] = true
			p.mu.Unlock()
		}
	})
	purgedObjects.WithLabelValues(req.reason).Add(float64(res.deleted))
	switch {
	case errors.Is(err, errShardCameBack):
		partitionPurges.WithLabelValues(req.reason, "interrupted").Inc()
		logger.Info("Stopped purging: the shard renewed its heartbeat and pushes again", "deleted", res.deleted, "duration", res.duration)
		return nil
	case err != nil:
		return err
	}
	partitionPurges.WithLabelValues(req.reason, "purged").Inc()
	logger.Info("Purged the partition of a shard that is gone", "deleted", res.deleted, "types", res.types, "batches", res.batches, "duration", res.duration)
	return nil
}

// isOwnDelete reports whether a deletion at rev in shard's partition was
// this purger's. Events arrive in revision order, so revisions before rev
// will not be asked about again.
func (p *ShardPurger) isOwnDelete(shard string, rev int64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	own := p.purging[shard] || p.ownDeletes[rev]
	for r := range p.ownDeletes {
		if r < rev {
			delete(p.ownDeletes, r)
		}
	}
	return own
}

func (p *ShardPurger) setPurging(shard string, on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if on {
		p.purging[shard] = true
	} else {
		delete(p.purging, shard)
	}
}

func (p *ShardPurger) wait(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
