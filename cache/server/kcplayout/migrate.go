package kcplayout

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Migrate brings every object below prefix into this server's layout: an
// object in kcp's cache-server's layout moves to its key in ours, with the
// partition its key names as its kcp.io/shard and kcp.io/cluster
// annotations; a CRD without them gets them in place. A server runs it
// before it builds any storage (its watch caches cannot start on kcp's
// layout); on data already in its layout it reads the keys only, and the
// values of CRDs and of the keys whose segments could be either layout's
// (namespaced objects of ours; see shapeOf).
//
// It is safe while other servers of this project serve the same etcd, and
// when interrupted: see the package's guarantees.
func Migrate(ctx context.Context, kv clientv3.KV, prefix string) (Report, error) {
	var r Report
	err := scan(ctx, kv, prefix, func(key string) error {
		r.Keys++
		segs, _ := segments(prefix, key)
		switch shapeOf(segs) {
		case shapeOther:
			r.skip(key)
			return nil
		case shapeBookkeeping, shapeOurs:
			r.InPlace++
			return nil
		}
		return r.migrateOne(ctx, kv, prefix, key, segs)
	})
	return r, err
}

// migrateOne settles one key whose value says what it is: a CRD, an object
// of kcp's layout, or a namespaced object of ours.
func (r *Report) migrateOne(ctx context.Context, kv clientv3.KV, prefix, key string, segs []string) error {
	for range maxAttempts {
		resp, err := kv.Get(ctx, key)
		if err != nil {
			return fmt.Errorf("reading %s: %w", key, err)
		}
		cur := only(resp.Kvs)
		if cur == nil {
			return nil // moved or deleted since the scan read it
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
		case k.isCRD():
			if m.hasPartition(k) {
				r.InPlace++
				return nil
			}
			value, err := withPartition(cur.Value, k)
			if err != nil {
				return fmt.Errorf("annotating %s: %w", key, err)
			}
			put, err := kv.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", cur.ModRevision)).
				Then(clientv3.OpPut(key, string(value))).Commit()
			if err != nil {
				return fmt.Errorf("annotating %s: %w", key, err)
			}
			if put.Succeeded {
				r.Annotated++
				return nil
			}
		case !fromKCP:
			r.InPlace++
			return nil
		default:
			res, err := move(ctx, kv, key, k.Ours(prefix), func(v []byte) ([]byte, error) { return withPartition(v, k) })
			if err != nil {
				return err
			}
			r.count(res)
			return nil
		}
	}
	return fmt.Errorf("annotating %s: it changed under %d attempts", key, maxAttempts)
}
