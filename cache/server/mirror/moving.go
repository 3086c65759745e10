package mirror

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/klog/v2"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

// A shard's home moves only by an explicit claim (package homes): the operator
// starts (or restarts) the new home with --adopt-shard, which claims the
// shard at a higher generation, and points the shard at it; the shard pushes
// its partition there in full, as its replication does at every start.
//
//   - The new home takes the shard's writes and no longer takes the
//     shard's objects from the old home. The copies it mirrored before are
//     its state of the shard from the claim on: it serves them, its peers
//     take them as its own (apply.go: the claim says whose an object is,
//     not its annotations), and it rewrites them without their copy
//     bookkeeping (promoteAdopted) so that they are its own objects in its
//     storage too. The shard's push then replaces or deletes them.
//   - The old home, reading the higher claim in the new home's table, gives
//     the shard up: it lists that peer again, and its own objects of the
//     shard are replaced in place by the new home's (those the new home
//     holds) or deleted (the others). This is the only path on which a
//     home's own objects are replaced by copies. The shard's writes at the
//     old home are refused from then on.
//   - Every other cache follows the new home the same way: its copies of
//     the shard, whichever home they came from, are the new home's stream's
//     to replace or delete once the claim is known; the old home's stream
//     leaves them alone. So an object that exists throughout is updated in
//     place at every cache, never deleted and created again.
//   - Until a cache has listed the new home, its copies of the new home's
//     partitions are in no state of the new home it could name: consistent
//     reads wait for that list (or answer 503 MirrorBehind), and stale reads
//     carry no home revision.

// requestRelist makes every stream of the peer list again, and counts none
// of them current until it has.
func (p *source) requestRelist() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.listRequests++
	for _, s := range p.streams {
		s.needList(p.listRequests)
	}
	close(p.relist)
	p.relist = make(chan struct{})
}

// relistChan is closed at the next requestRelist; it also returns the list
// requests made so far.
func (p *source) relistChan() (<-chan struct{}, int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.relist, p.listRequests
}

// promoteAdopted rewrites this cache's copies of the shards it adopted
// (--adopt-shard) as its own objects: without the copy bookkeeping, so that
// they are what this cache holds as the shard's home, by their annotations
// as by the claim. It runs once the adoption has acted, and again at every
// start (a restart may have cut it short), until it has gone through every
// type; an object the shard replaced meanwhile (a conflict) is left to the
// shard.
func (m *Mirror) promoteAdopted(ctx context.Context) error {
	shards := m.homes.AdoptedHere(ctx)
	if len(shards) == 0 {
		return nil
	}
	logger := klog.FromContext(ctx)
	promoted := 0
	for _, gvr := range m.cfg.Resources() {
		for _, shard := range shards {
			res := m.local.Cluster(shard, kcpcache.Wildcard).Resource(gvr)
			for token := ""; ; {
				page, err := res.List(ctx, metav1.ListOptions{Limit: listPageSize, Continue: token})
				if err != nil {
					return fmt.Errorf("listing the copies of adopted shard %q: %w", shard, err)
				}
				for i := range page.Items {
					u := &page.Items[i]
					if isHomeObject(u) || !inPartition(u) {
						continue
					}
					if home, ok := m.homeOf(shard); !ok || home != m.cfg.CacheName {
						// The shard moved on since: its new home's stream
						// brings it.
						return nil
					}
					a := u.GetAnnotations()
					for _, k := range kcpcache.CopyBookkeeping {
						delete(a, k)
					}
					u.SetAnnotations(a)
					k := keyOf(u)
					r := m.local.Cluster(k.shard, k.cluster).Resource(gvr)
					var w dynamic.ResourceInterface = r
					if k.namespace != "" {
						w = r.Namespace(k.namespace)
					}
					if _, err := w.Update(ctx, u, metav1.UpdateOptions{}); err != nil && !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
						return fmt.Errorf("making the copy %v of adopted shard %q this cache's own: %w", k, shard, err)
					}
					promoted++
				}
				if token = page.GetContinue(); token == "" {
					break
				}
			}
		}
	}
	if promoted > 0 {
		logger.Info("Made the copies of adopted shards this cache's own objects", "shards", shards, "objects", promoted)
	}
	return nil
}

// promoteLoop runs promoteAdopted until it has gone through, retrying
// after failures, or until ctx ends.
func (m *Mirror) promoteLoop(ctx context.Context) {
	delay := restartBackoff
	for ctx.Err() == nil {
		err := m.promoteAdopted(ctx)
		if err == nil {
			return
		}
		klog.FromContext(ctx).Info("Making the copies of adopted shards this cache's own; retrying", "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(delay.Step()):
		}
	}
}
