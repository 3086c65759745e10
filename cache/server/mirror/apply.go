package mirror

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/klog/v2"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

// copyKey names a copy across partitions.
type copyKey struct {
	shard, cluster, namespace, name string
}

func keyOf(u *unstructured.Unstructured) copyKey {
	a := u.GetAnnotations()
	return copyKey{a[kcpcache.AnnotationShard], a[kcpcache.AnnotationCluster], u.GetNamespace(), u.GetName()}
}

// isHomeObject reports whether u is held as its home by the cache it was
// read at: written there by its shard, not mirrored, and not that cache's
// own system data.
func isHomeObject(u *unstructured.Unstructured) bool {
	return u.GetAnnotations()[kcpcache.AnnotationHome] == "" && inPartition(u)
}

// inPartition reports whether u is in a shard's partition, not a cache's
// own system data.
func inPartition(u *unstructured.Unstructured) bool {
	a := u.GetAnnotations()
	shard := a[kcpcache.AnnotationShard]
	return shard != "" && shard != kcpcache.SystemShard && a[kcpcache.AnnotationCluster] != ""
}

// A peer's objects of a shard are the shard's state when the peer holds the
// shard's claim, whether the peer holds them as written there or, right
// after it adopted the shard, as the copies it mirrored before (moving.go):
// the claim says whose they are, not the objects' annotations. So a home
// move replaces copies in place and never removes what the new home holds.

// partitionClient addresses the copy's partition here.
func (s *stream) partitionClient(k copyKey) dynamic.ResourceInterface {
	r := s.m.local.Cluster(k.shard, k.cluster).Resource(s.gvr)
	if k.namespace != "" {
		return r.Namespace(k.namespace)
	}
	return r
}

// desiredCopy is the copy of the peer's object u, of a shard homed at home,
// as it is stored here: a relayed copy keeps its home's bookkeeping, and
// gains the peer in its path.
func (s *stream) desiredCopy(u *unstructured.Unstructured, home string) *unstructured.Unstructured {
	c := u.DeepCopy()
	a := c.GetAnnotations()
	if a == nil {
		a = map[string]string{}
	}
	if home == s.peer.Name {
		a[kcpcache.AnnotationHome] = s.peer.Name
		a[kcpcache.AnnotationHomeResourceVersion] = u.GetResourceVersion()
		a[kcpcache.AnnotationHomeEpoch] = s.listEpoch
		a[kcpcache.AnnotationHomePath] = s.peer.Name
	} else {
		a[kcpcache.AnnotationHomePath] = a[kcpcache.AnnotationHomePath] + "," + s.peer.Name
	}
	c.SetAnnotations(a)
	c.SetResourceVersion("")
	return c
}

// homeRevisionOf is the home's resourceVersion a copy of the peer's object
// u records: the object's own at its home, a relayed copy's as relayed.
func (s *stream) homeRevisionOf(u *unstructured.Unstructured, home string) string {
	if home == s.peer.Name {
		return u.GetResourceVersion()
	}
	return u.GetAnnotations()[kcpcache.AnnotationHomeResourceVersion]
}

// homeVia returns the home of shard when the shard's partitions are taken
// from this stream's peer: the peer itself, or a home the peer relays.
func (s *stream) homeVia(shard string) (string, bool) {
	home, ok := s.m.homeOf(shard)
	if !ok || home == s.m.cfg.CacheName || s.m.sourceFor(home) != s.peer {
		return "", false
	}
	return home, true
}

// relayedHomeOf returns the home of shard when the peer relays it to this
// cache.
func (s *stream) relayedHomeOf(shard string) (string, bool) {
	home, ok := s.homeVia(shard)
	return home, ok && home != s.peer.Name
}

// takesRelayed reports whether the peer's object u is taken as a copy of
// home, which the peer relays: it must be the peer's copy of that home (not
// of a former home, which the peer has not rewritten yet), must not have
// passed through this cache, and the home must be followed (confirmed
// through the peer before the stream's last list).
func (s *stream) takesRelayed(u *unstructured.Unstructured, home string) bool {
	return u.GetAnnotations()[kcpcache.AnnotationHome] == home && !pathContains(u, s.m.cfg.CacheName) && s.isFollowed(home)
}

// listPageSize is how many objects one page of a list holds, here and at
// the peer: a mirror's first copy of a large home holds one page of each
// type at a time, not the whole type decoded at once (a home of a quarter
// of a million objects took more than 6 GiB that way).
const listPageSize = 500

// localCopy is what converge keeps of a local object of the type: enough to
// tell whether it is the peer's to replace or delete and whether it already
// holds what the peer has, without keeping the object.
type localCopy struct {
	uid types.UID
	// home is the object's home annotation: empty for an object written
	// here by its shard.
	home  string
	epoch string
	// homeRevision is the home's resourceVersion the copy records
	// (kcpcache.AnnotationHomeResourceVersion).
	homeRevision string
	content      [sha256.Size]byte
}

// converge makes the copies of this type whose home is the peer exactly the
// peer's home objects in the list that starts with first (more fetches the
// next page of a continue token). Only the shards whose claim the peer
// holds are taken (package homes): the peer's whole table is learnt first, and a
// shard met later whose claim is still unknown is asked of the peer, so
// that nothing the peer holds as home is skipped silently.
func (s *stream) converge(ctx context.Context, first *unstructured.UnstructuredList, more morePages) error {
	if err := s.m.homes.AskPeer(ctx, s.peer.Name, ""); err != nil {
		return fmt.Errorf("reading the homes table of peer %q: %w", s.peer.Name, err)
	}
	have, err := s.localCopies(ctx)
	if err != nil {
		return err
	}
	want := map[copyKey]bool{}
	// The page's writes go to a bounded set of workers: each key appears
	// once in a list, so no two writes of the same key race, and the
	// stream's revision advances only after converge returns, when every
	// write has been acknowledged (listAndWatch). A failed write ends the
	// convergence with its error, and the stream starts over with a list
	// without advancing. One write at a time waited on a loopback round
	// trip and an etcd commit per object: 346 copies per second at 250,000
	// objects while the CPU was mostly idle.
	ctx, pool := newWriters(ctx, convergeWorkers)
	defer pool.stop()
	ahead := newPageAhead(ctx, first, more)
	defer ahead.stop()
	for page := first; page != nil; {
		for i := range page.Items {
			u := &page.Items[i]
			k := keyOf(u)
			if !inPartition(u) {
				continue
			}
			if err := s.m.homes.LearnFromPeer(ctx, s.peer.Name, k.shard); err != nil {
				return err
			}
			home, ok := s.homeVia(k.shard)
			if !ok {
				continue
			}
			want[k] = true
			if s.peer.holds.isHeld(k.shard) || home != s.peer.Name && !s.takesRelayed(u, home) {
				// Held, or a relayed object not taken: the copy here
				// stays as it is.
				continue
			}
			existing, ok := have[k]
			ok = ok && s.replaceable(k.shard)
			if ok && home != s.peer.Name && existing.uid == u.GetUID() && olderThan(s.homeRevisionOf(u, home), existing.homeRevision) {
				// A relay never takes a copy back to an older state of
				// its home than the one here.
				continue
			}
			// A copy is kept only when it records the home's revision too:
			// the home rewrites an object without changing its content
			// when it makes its copies its own after adopting the shard
			// (promoteAdopted, moving.go), and a copy left with the older
			// revision names a state the home no longer holds until the
			// object is written again (a cache holding k0 as the new
			// home's 549 while the new home holds it at 560 kept a home
			// move in the robustness harness from completing).
			if ok && existing.content == contentOf(s.desiredCopy(u, home)) && existing.homeRevision == s.homeRevisionOf(u, home) {
				continue
			}
			isNew := !ok
			if err := pool.do(func() error { return s.applyPeerObject(ctx, u, isNew, false) }); err != nil {
				return err
			}
		}
		next, err := ahead.next()
		if err != nil {
			return fmt.Errorf("listing at the peer: %w", err)
		}
		page = next
	}
	if err := pool.wait(); err != nil {
		return err
	}
	for k, c := range have {
		if want[k] || !s.replaceable(k.shard) || s.peer.holds.isHeld(k.shard) {
			continue
		}
		if home, relayed := s.relayedHomeOf(k.shard); relayed && !s.isFollowed(home) {
			// The peer did not confirm the home before this list: what
			// it lacks may be what it has not caught up with yet.
			continue
		}
		// An object of a shard homed at the peer that the peer does not
		// hold: deleted there, or (the shard's home moved to the peer) one
		// the new home does not hold.
		if err := s.deleteCopy(ctx, k, c.uid); err != nil {
			return err
		}
	}
	objects.WithLabelValues(s.peer.Name, s.gvr.GroupResource().String()).Set(float64(len(want)))
	return nil
}

// localCopies reads every local object of the type, a page at a time, and
// holds the partitions of the copies that came from another epoch of the
// peer than the list's (the peer was restored: restored.go).
func (s *stream) localCopies(ctx context.Context) (map[copyKey]localCopy, error) {
	have := map[copyKey]localCopy{}
	var fromOtherEpoch []string
	relayedOtherEpoch := map[string][]string{}
	res := s.m.local.Cluster(kcpcache.Wildcard, kcpcache.Wildcard).Resource(s.gvr)
	for token := ""; ; {
		page, err := res.List(ctx, metav1.ListOptions{Limit: listPageSize, Continue: token})
		if err != nil {
			return nil, fmt.Errorf("listing the local copies: %w", err)
		}
		for i := range page.Items {
			u := &page.Items[i]
			a := u.GetAnnotations()
			c := localCopy{uid: u.GetUID(), home: a[kcpcache.AnnotationHome], epoch: a[kcpcache.AnnotationHomeEpoch], homeRevision: a[kcpcache.AnnotationHomeResourceVersion]}
			k := keyOf(u)
			if s.replaceable(k.shard) {
				// Only what may be the peer's is compared: a digest left
				// empty (a claim learnt later) costs a write, not a miss.
				c.content = contentOf(u)
				if c.home == s.peer.Name && c.epoch != "" && c.epoch != s.listEpoch {
					fromOtherEpoch = append(fromOtherEpoch, k.shard)
				}
				if e := s.epochs[c.home]; c.home != s.peer.Name && e != "" && c.epoch != "" && c.epoch != e {
					relayedOtherEpoch[c.home] = append(relayedOtherEpoch[c.home], k.shard)
				}
			}
			have[k] = c
		}
		if token = page.GetContinue(); token == "" {
			break
		}
	}
	if len(fromOtherEpoch) > 0 {
		s.peer.holdHome(ctx, s.m, s.peer.Name, s.listEpoch, fromOtherEpoch...)
	}
	for home, shards := range relayedOtherEpoch {
		// A relayed home whose epoch changed since the copies here were
		// taken: held here as at every hop.
		s.peer.holdHome(ctx, s.m, home, s.epochs[home], shards...)
	}
	return have, nil
}

// replaceable reports whether the local object c of shard is the peer's to
// replace or delete, by the claims known now: every object of a shard whose
// claim the peer holds, whether a copy (of the peer, or of a former home)
// or an object written here by the shard while this cache was its home
// (the shard's home moved to the peer: moving.go). Objects of a shard
// whose claim is unknown or in conflict, or held here, are nobody's to
// replace: they stay as they are.
func (s *stream) replaceable(shard string) bool {
	_, ok := s.homeVia(shard)
	return ok
}

// olderThan reports whether resourceVersion a is a lower revision than b
// (both the home's); false when either is not a revision.
func olderThan(a, b string) bool {
	x, errA := strconv.ParseInt(a, 10, 64)
	y, errB := strconv.ParseInt(b, 10, 64)
	return errA == nil && errB == nil && x < y
}

// applyPeerObject writes the copy of the peer's object u here when the
// peer holds the claim of u's shard. Nothing is deleted on the way: an
// object of a shard whose home moved elsewhere stays until the new home's
// stream replaces it (or deletes it, if the new home does not hold it).
//
// isNew says the copy is likely missing (a watch ADDED event, a list item
// with no copy here): it is created first, updated only if it exists, which
// spares a new object the round trip of an update answered NotFound.
// holding says the caller holds applyMu (a watch event's apply), which a
// replacement needs (replaceCopy).
func (s *stream) applyPeerObject(ctx context.Context, u *unstructured.Unstructured, isNew, holding bool) error {
	k := keyOf(u)
	if s.peer.holds.isHeld(k.shard) || !inPartition(u) {
		return nil
	}
	if err := s.m.homes.LearnFromPeer(ctx, s.peer.Name, k.shard); err != nil {
		return err
	}
	home, ok := s.homeVia(k.shard)
	if !ok || home != s.peer.Name && !s.takesRelayed(u, home) {
		// Not the peer's shard by the claims and routes (another home or
		// path, a conflict), or a relayed object not taken: the peer's
		// object is not taken.
		return nil
	}
	desired := s.desiredCopy(u, home)
	w := s.m.writer
	if isNew {
		err := w.create(ctx, s.gvr, k, desired)
		switch {
		case err == nil:
			writes.WithLabelValues(s.peer.Name, "create").Inc()
			return nil
		case !apierrors.IsAlreadyExists(err):
			return fmt.Errorf("creating the copy %v: %w", k, err)
		}
	}
	err := w.update(ctx, s.gvr, k, desired)
	switch {
	case err == nil:
		writes.WithLabelValues(s.peer.Name, "update").Inc()
		return nil
	case apierrors.IsNotFound(err):
		if err := w.create(ctx, s.gvr, k, desired); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating the copy %v: %w", k, err)
		}
		writes.WithLabelValues(s.peer.Name, "create").Inc()
		return nil
	case apierrors.IsInvalid(err) || apierrors.IsConflict(err):
		// The name was deleted and created again at the home (another
		// uid): replace the copy.
		klog.FromContext(ctx).V(4).Info("Replacing a copy", "key", k, "err", err)
		if !holding {
			s.applyMu.Lock()
			defer s.applyMu.Unlock()
		}
		return s.replaceCopy(ctx, s.partitionClient(k), k, desired)
	default:
		return fmt.Errorf("updating the copy %v: %w", k, err)
	}
}

// replaceCopy replaces the copy k by desired, an object of the same name
// with another uid: it deletes the copy and creates desired, s.applyMu
// held. The name is absent from the local storage between the two writes;
// no stale read is served there: every stale read holds applyMu from
// before it fixes the local revision it is served at (header.go) until it
// has, and that revision, after the replacement, counts both writes (the
// state version moves, so no revision read during the replacement is
// reused). A replacement was a gap a stale read of the name could fall
// into: west served a restored south's re-pushed object absent once in
// 77 reads (TestRelayHomeRestoredWithoutHeartbeatsIsHeldAtEveryHop).
func (s *stream) replaceCopy(ctx context.Context, r dynamic.ResourceInterface, k copyKey, desired *unstructured.Unstructured) error {
	defer s.m.stateVersion.Add(1)
	if err := announceEpoch(ctx, r, k, desired); err != nil {
		return err
	}
	if err := r.Delete(ctx, k.name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting the copy %v to replace it: %w", k, err)
	}
	if err := s.m.writer.create(ctx, s.gvr, k, desired); err != nil {
		return fmt.Errorf("creating the copy %v again: %w", k, err)
	}
	writes.WithLabelValues(s.peer.Name, "replace").Inc()
	return nil
}

// announceEpoch writes the copy k, about to be replaced by desired (the
// home holds its name with another uid), with desired's home epoch first,
// when the two came from different epochs of the same home. A cache that
// takes its copies of the home through this one must hold the home's
// partitions before it applies anything of the new epoch (restored.go),
// and a deletion carries the epoch of the copy it deleted: without the
// announcement it would apply the deletion as the old epoch's, then hold
// on the new copy's creation, and serve the name absent until its own
// hold ended (east lost a re-pushed object for 2.3 s after west, its
// relay, followed a restored south). An object of this cache's own (no
// home annotation), or a copy of another home, announces nothing.
func announceEpoch(ctx context.Context, r dynamic.ResourceInterface, k copyKey, desired *unstructured.Unstructured) error {
	home, epoch := desired.GetAnnotations()[kcpcache.AnnotationHome], desired.GetAnnotations()[kcpcache.AnnotationHomeEpoch]
	if epoch == "" {
		return nil
	}
	existing, err := r.Get(ctx, k.name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("reading the copy %v to replace it: %w", k, err)
	}
	a := existing.GetAnnotations()
	if a[kcpcache.AnnotationHome] != home || a[kcpcache.AnnotationHomeEpoch] == epoch {
		return nil
	}
	a[kcpcache.AnnotationHomeEpoch] = epoch
	existing.SetAnnotations(a)
	if _, err := r.Update(ctx, existing, metav1.UpdateOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("announcing the home epoch %s on the copy %v before replacing it: %w", epoch, k, err)
	}
	return nil
}

// stillPeersShard asks the peer for the claim of the shard of u, an object
// it holds as a copy, and reports whether the peer holds it: the peer
// adopted the shard and has not made its copies its own yet (take u), or
// it gave the shard up since this cache last read its table (do not). A
// list reads the peer's whole table first and needs no such question.
func (s *stream) stillPeersShard(ctx context.Context, u *unstructured.Unstructured) (bool, error) {
	if !inPartition(u) {
		return true, nil
	}
	shard := keyOf(u).shard
	if isHomeObject(u) {
		return true, nil
	}
	// A copy at the peer: of a home it relays (its claim may not be known
	// here yet: a shard that just started writing), or of a shard the
	// peer adopted.
	if err := s.m.homes.LearnFromPeer(ctx, s.peer.Name, shard); err != nil {
		return false, err
	}
	home, ok := s.homeVia(shard)
	if ok && home != s.peer.Name {
		// A copy the peer relays: the route says whose it is.
		return s.takesRelayed(u, home), nil
	}
	if !ok {
		return false, nil
	}
	if err := s.m.homes.AskPeer(ctx, s.peer.Name, shard); err != nil {
		return false, fmt.Errorf("asking peer %q for the home of shard %q: %w", s.peer.Name, shard, err)
	}
	home, ok = s.m.homeOf(shard)
	return ok && home == s.peer.Name, nil
}

// applyPeerDeletion deletes the copy of an object the peer deleted, when
// the peer holds the claim of its shard.
func (s *stream) applyPeerDeletion(ctx context.Context, u *unstructured.Unstructured) error {
	k := keyOf(u)
	if !inPartition(u) || s.peer.holds.isHeld(k.shard) {
		return nil
	}
	home, ok := s.homeVia(k.shard)
	if !ok || home != s.peer.Name && !s.takesRelayed(u, home) {
		return nil
	}
	return s.deleteCopy(ctx, k, u.GetUID())
}

// deleteCopy deletes the copy k if it still has uid.
func (s *stream) deleteCopy(ctx context.Context, k copyKey, uid types.UID) error {
	opts := metav1.DeleteOptions{}
	if uid != "" {
		opts.Preconditions = &metav1.Preconditions{UID: &uid}
	}
	err := s.partitionClient(k).Delete(ctx, k.name, opts)
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("deleting the copy %v: %w", k, err)
	}
	writes.WithLabelValues(s.peer.Name, "delete").Inc()
	return nil
}

// contentOf is a digest of what the mirror controls in a copy: everything
// but the server's bookkeeping (resourceVersion, generation, managed
// fields) and the home's resourceVersion, which moves with every write at
// the home even when the copy would not change. Two copies with the same
// digest need no write; JSON encodes maps in key order, so equal content
// has one encoding.
func contentOf(u *unstructured.Unstructured) [sha256.Size]byte {
	b, err := json.Marshal(contentFields(u))
	if err != nil {
		// Unstructured content came from JSON; a value that cannot be
		// encoded again never equals another, so the copy is written.
		return sha256.Sum256([]byte(err.Error() + string(u.GetUID())))
	}
	return sha256.Sum256(b)
}

// contentFields is the part of a copy that says whether it changed: what
// every write rewrites (resourceVersion, generation, managed fields, the
// home's resourceVersion) left out.
func contentFields(u *unstructured.Unstructured) map[string]interface{} {
	c := u.DeepCopy()
	c.SetResourceVersion("")
	c.SetGeneration(0)
	c.SetManagedFields(nil)
	a := c.GetAnnotations()
	delete(a, kcpcache.AnnotationHomeResourceVersion)
	c.SetAnnotations(a)
	return c.Object
}
