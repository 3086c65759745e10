package removal

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/klog/v2"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

// DefaultBatchSize bounds the keys one purge transaction deletes: one
// revision and one burst of watch events of at most this many objects.
const DefaultBatchSize = 500

// errShardCameBack stops a purge whose shard renewed its heartbeat (or got
// one) after the decision to purge.
var errShardCameBack = errors.New("the shard's heartbeat changed during the purge")

// purgeResult is what one purge of a partition did.
type purgeResult struct {
	deleted  int64
	batches  int
	types    int
	duration time.Duration
}

// purgePartition deletes every key of shard's partition, type by type, in
// batches of at most batchSize keys. Each batch is one transaction that
// holds only while the shard's heartbeat key still has modRevision guard
// (0: still absent). The heartbeat type goes last, so a partition is never
// left with a heartbeat but without the objects it vouches for.
func purgePartition(ctx context.Context, kv clientv3.KV, prefix, shard string, guard int64, batchSize int, onBatch func(typePrefix string, revision int64)) (purgeResult, error) {
	start := time.Now()
	var res purgeResult
	types, err := typePrefixes(ctx, kv, prefix)
	if err != nil {
		return res, fmt.Errorf("listing the stored types: %w", err)
	}
	hbType := typePrefix(prefix, kcpcache.HeartbeatResource.GroupResource())
	types = slices.DeleteFunc(types, func(p string) bool { return p == hbType })
	types = append(types, hbType)
	hbKey := heartbeatKey(prefix, shard)
	for _, tp := range types {
		partition := tp + shard + "/"
		end := clientv3.GetPrefixRangeEnd(partition)
		touched := false
		for {
			resp, err := kv.Get(ctx, partition, clientv3.WithRange(end), clientv3.WithKeysOnly(), clientv3.WithLimit(int64(batchSize)))
			if err != nil {
				return res, fmt.Errorf("listing %s: %w", partition, err)
			}
			if len(resp.Kvs) == 0 {
				break
			}
			first, last := string(resp.Kvs[0].Key), string(resp.Kvs[len(resp.Kvs)-1].Key)
			// The range is exactly the keys just listed, plus any created
			// between them meanwhile, which belong to the same partition.
			txn, err := kv.Txn(ctx).
				If(clientv3.Compare(clientv3.ModRevision(hbKey), "=", guard)).
				Then(clientv3.OpDelete(first, clientv3.WithRange(last+"\x00"))).
				Commit()
			if err != nil {
				return res, fmt.Errorf("deleting in %s: %w", partition, err)
			}
			if !txn.Succeeded {
				res.duration = time.Since(start)
				return res, errShardCameBack
			}
			if first <= hbKey && hbKey <= last {
				// The heartbeat itself is gone now; a shard that comes
				// back creates it anew, which the guard then sees.
				guard = 0
			}
			if onBatch != nil {
				onBatch(tp, txn.Header.Revision)
			}
			res.deleted += txn.Responses[0].GetResponseDeleteRange().Deleted
			res.batches++
			touched = true
			klog.FromContext(ctx).V(4).Info("Purged a batch", "partition", partition, "keys", len(resp.Kvs))
			if !resp.More {
				break
			}
		}
		if touched {
			res.types++
		}
	}
	res.duration = time.Since(start)
	return res, nil
}
