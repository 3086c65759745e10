package kcplayout

import (
	"context"
	"fmt"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

// Export brings every object below prefix into kcp's cache-server's
// layout, for kcp's cache-server to take over the data: kcp's reads only
// its own layout, and would serve empty partitions while this server's
// keys stayed behind. It also deletes what only this server uses, which
// kcp's would never read or remove: its bookkeeping (the epoch marker, the
// home claims), the shards' heartbeats (this project's hook writes them,
// kcp does not read them), and the CRDs removeCRD names that declare a
// type holding no objects (the heartbeats', the types of a kcp release
// line kcp's cache-server does not serve). The other CRDs stay: kcp's
// cache-server overwrites each with its own declaration at start, and the
// shards' informers on the cache's CRDs see an update, not a deletion.
//
// Objects keep their values: kcp's reads them as stored, with the
// partition taken from the key. The server must be stopped: it would see
// its objects disappear. Export is safe to run again, and when
// interrupted: see the package's guarantees.
func Export(ctx context.Context, kv clientv3.KV, prefix string, removeCRD func(name string) bool) (Report, error) {
	var r Report
	var crds []string
	err := scan(ctx, kv, prefix, func(key string) error {
		r.Keys++
		segs, _ := segments(prefix, key)
		switch shapeOf(segs) {
		case shapeOther:
			r.skip(key)
			return nil
		case shapeBookkeeping:
			return r.remove(ctx, kv, key)
		case shapeCRD:
			crds = append(crds, key)
			return nil
		}
		return r.exportOne(ctx, kv, prefix, key, segs)
	})
	if err != nil {
		return r, err
	}
	// After the objects moved: whether a type holds any is known now.
	for _, key := range crds {
		segs, _ := segments(prefix, key)
		name := segs[len(segs)-1]
		if removeCRD == nil || !removeCRD(name) {
			r.InPlace++
			continue
		}
		empty, err := holdsNothing(ctx, kv, prefix, name)
		if err != nil {
			return r, err
		}
		if !empty {
			r.InPlace++
			continue
		}
		if err := r.remove(ctx, kv, key); err != nil {
			return r, err
		}
	}
	return r, nil
}

// holdsNothing reports whether no object of the CRD named name
// ("<plural>.<group>") is below prefix, in either layout, with or without
// an identity.
func holdsNothing(ctx context.Context, kv clientv3.KV, prefix, name string) (bool, error) {
	plural, group, _ := strings.Cut(name, ".")
	base := strings.TrimSuffix(prefix, "/") + "/" + group + "/" + plural
	for _, p := range []string{base + "/", base + ":"} {
		resp, err := kv.Get(ctx, p, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			return false, fmt.Errorf("counting the objects below %s: %w", p, err)
		}
		if resp.Count > 0 {
			return false, nil
		}
	}
	return true, nil
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
