package mirror

import (
	"context"
	"time"

	"k8s.io/klog/v2"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

// Each partition's lag behind its home: the home answers, at
// kcpcache.RevisionsPath, the revision of the last change of every
// partition and type it holds; a partition whose home revision is above
// what the type's stream has applied here is behind by the difference, for
// as long as this mirror has seen it so. The series are per (home, shard,
// resource) of the shards homed at a peer, and only for types the home
// holds objects of: at most shards × types per home (e.g. 200 shards × 21
// kcp types).

// lagKey is one partition's type.
type lagKey struct {
	shard, resource string
}

// lagLimit bounds the answer read from a home (about 100 bytes a
// partition).
const lagLimit = 64 << 20

// reportLag reads p's revisions and sets the partition lag gauges of the
// shards homed at p.
func (p *source) reportLag(ctx context.Context, m *Mirror) {
	var ans kcpcache.HomeRevisionsAnswer
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := p.GetJSON(rctx, kcpcache.RevisionsPath, nil, lagLimit, "the home's revisions", &ans); err != nil {
		klog.FromContext(ctx).V(2).Info("Could not read a peer's revisions for the lag", "peer", p.Name, "err", err)
		return
	}
	claims, _ := m.homes.Known()
	homed := map[string]bool{}
	for _, c := range claims {
		if c.Home == p.Name {
			homed[c.Shard] = true
		}
	}
	p.mu.Lock()
	applied := map[string]int64{}
	epochs := map[string]string{}
	for gr, s := range p.streams {
		applied[gr.String()], epochs[gr.String()], _ = s.state()
	}
	p.mu.Unlock()
	now := time.Now()
	current := map[lagKey]bool{}
	for _, part := range ans.Partitions {
		a, mirrored := applied[part.Resource]
		if !homed[part.Shard] || !mirrored {
			continue
		}
		k := lagKey{shard: part.Shard, resource: part.Resource}
		current[k] = true
		behind := part.Revision - a
		if epochs[part.Resource] != ans.Epoch {
			// Revisions of two epochs do not compare: the stream lists the
			// home again (or the partition is held after a restore).
			behind = max(behind, 1)
		}
		if behind <= 0 {
			behind = 0
			delete(p.behindSince, k)
		} else if _, ok := p.behindSince[k]; !ok {
			p.behindSince[k] = now
		}
		secs := 0.0
		if since, ok := p.behindSince[k]; ok {
			secs = now.Sub(since).Seconds()
		}
		partitionLagRevisions.WithLabelValues(p.Name, k.shard, k.resource).Set(float64(behind))
		partitionLagSeconds.WithLabelValues(p.Name, k.shard, k.resource).Set(secs)
	}
	for k := range p.lagSeries {
		if !current[k] {
			partitionLagRevisions.DeleteLabelValues(p.Name, k.shard, k.resource)
			partitionLagSeconds.DeleteLabelValues(p.Name, k.shard, k.resource)
			delete(p.behindSince, k)
		}
	}
	p.lagSeries = current
}
