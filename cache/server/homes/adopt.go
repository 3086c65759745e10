package homes

import (
	"context"
	"sort"

	"k8s.io/klog/v2"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

// isAdopting reports whether shard is one that --adopt-shard names and the
// adoption has not acted yet (Run acts at its start).
func (t *Table) isAdopting(shard string) bool {
	select {
	case <-t.adoptDone:
		return false
	default:
	}
	for _, s := range t.cfg.Adopt {
		if s == shard {
			return true
		}
	}
	return false
}

// adopt claims the shards of --adopt-shard that it has not acted on yet.
func (t *Table) adopt(ctx context.Context) {
	logger := klog.FromContext(ctx)
	for _, shard := range t.cfg.Adopt {
		t.mu.Lock()
		gen, done := t.adopted[shard]
		var c kcpcache.HomeClaim
		if !done {
			c = kcpcache.HomeClaim{Shard: shard, Home: t.cfg.CacheName, Generation: t.claims[shard].Generation + 1}
			old := t.claims[shard]
			t.claims[shard] = c
			t.adopted[shard] = c.Generation
			delete(t.conflicts, shard)
			homeConflicts.Set(float64(len(t.conflicts)))
			if old.Home != "" {
				homeInfo.DeleteLabelValues(shard, old.Home)
			}
			homeInfo.WithLabelValues(shard, t.cfg.CacheName).Set(1)
		}
		t.mu.Unlock()
		if done {
			logger.Info("--adopt-shard acted before on this cache; not adopting again", "shard", shard, "generation", gen)
			continue
		}
		if err := t.save(ctx); err != nil {
			logger.Error(err, "Persisting an adopted shard's claim", "shard", shard)
		}
		logger.Info("Adopted a shard: this cache is its home", "shard", shard, "generation", c.Generation)
	}
}

// AdoptedHere returns, once --adopt-shard has acted (or ctx ended), the
// shards this cache adopted whose claim it still holds.
func (t *Table) AdoptedHere(ctx context.Context) []string {
	select {
	case <-t.adoptDone:
	case <-ctx.Done():
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []string
	for shard := range t.adopted {
		if t.claims[shard].Home == t.cfg.CacheName {
			out = append(out, shard)
		}
	}
	sort.Strings(out)
	return out
}
