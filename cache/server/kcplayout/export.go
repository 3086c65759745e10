package kcplayout

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

// Export brings every object below prefix into kcp's cache-server's
// layout, for kcp's cache-server to take over the data: kcp's reads only
// its own layout, and would serve empty partitions until every shard
// pushed its objects again, while this server's keys stayed behind. It
// also deletes what only this server uses, which kcp's would never read or
// remove:
//   - its bookkeeping (the epoch marker, the home claims);
//   - the shards' heartbeats (this project's hook writes them, kcp does not
//     read them);
//   - the CRDs: kcp's cache-server declares its own types again at every
//     start (it creates a missing CRD and overwrites an existing one), and
//     a type only this server declares (the heartbeats, kcp main's types
//     for a kcp v0.32 cache) would otherwise stay declared.
//
// Objects keep their values: kcp's reads them as stored, with the
// partition taken from the key. The server must be stopped: it would see
// its objects disappear. Export is safe to run again, and when
// interrupted: see the package's guarantees.
func Export(ctx context.Context, kv clientv3.KV, prefix string) (Report, error) {
	var r Report
	err := scan(ctx, kv, prefix, func(key string) error {
		r.Keys++
		segs, _ := segments(prefix, key)
		switch shapeOf(segs) {
		case shapeOther:
			r.skip(key)
			return nil
		case shapeBookkeeping, shapeCRD:
			return r.remove(ctx, kv, key)
		}
		return r.exportOne(ctx, kv, prefix, key, segs)
	})
	return r, err
}

// exportOne moves one object of this server's layout to kcp's, or deletes
// it if it is a heartbeat.
func (r *Report) exportOne(ctx context.Context, kv clientv3.KV, prefix, key string, segs []string) error {
	resp, err := kv.Get(ctx, key)
	if err != nil {
		return fmt.Errorf("reading %s: %w", key, err)
	}
	cur := only(resp.Kvs)
	if cur == nil {
		return nil
	}
	m, err := readMeta(cur.Value)
	if err != nil {
		r.skip(key)
		return nil
	}
	k, fromKCP, ok := parse(segs, m)
	switch {
	case !ok:
		r.skip(key)
		return nil
	case fromKCP:
		r.InPlace++
		return nil
	case k.Group == kcpcache.HeartbeatResource.Group && k.Resource == kcpcache.HeartbeatResource.Resource:
		return r.remove(ctx, kv, key)
	}
	res, err := move(ctx, kv, key, k.KCP(prefix), func(v []byte) ([]byte, error) { return v, nil })
	if err != nil {
		return err
	}
	r.count(res)
	return nil
}

func (r *Report) remove(ctx context.Context, kv clientv3.KV, key string) error {
	resp, err := kv.Delete(ctx, key)
	if err != nil {
		return fmt.Errorf("deleting %s: %w", key, err)
	}
	r.Removed += int(resp.Deleted)
	return nil
}
