package mirror

import (
	"context"
	"fmt"
	"reflect"

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

// isHomeObject reports whether the peer holds u as its home: written there
// by its shard, not mirrored, and not the peer's own system data.
func isHomeObject(u *unstructured.Unstructured) bool {
	a := u.GetAnnotations()
	shard := a[kcpcache.AnnotationShard]
	return a[kcpcache.AnnotationHome] == "" && shard != "" && shard != kcpcache.SystemShard && a[kcpcache.AnnotationCluster] != ""
}

// partitionClient addresses the copy's partition here.
func (s *stream) partitionClient(k copyKey) dynamic.ResourceInterface {
	r := s.m.local.Cluster(k.shard, k.cluster).Resource(s.gvr)
	if k.namespace != "" {
		return r.Namespace(k.namespace)
	}
	return r
}

// desiredCopy is the copy of the peer's object u as it is stored here.
func (s *stream) desiredCopy(u *unstructured.Unstructured) *unstructured.Unstructured {
	c := u.DeepCopy()
	a := c.GetAnnotations()
	if a == nil {
		a = map[string]string{}
	}
	a[kcpcache.AnnotationHome] = s.peer.name
	a[kcpcache.AnnotationHomeResourceVersion] = u.GetResourceVersion()
	a[kcpcache.AnnotationHomeEpoch] = s.listEpoch
	c.SetAnnotations(a)
	c.SetResourceVersion("")
	return c
}

// converge makes the copies of this type whose home is the peer exactly the
// peer's home objects in items. Only the shards whose claim the peer holds
// are taken (homes.go); a shard whose claim is unknown here is asked of the
// peer first, so that nothing the peer holds as home is skipped silently.
func (s *stream) converge(ctx context.Context, items []unstructured.Unstructured) error {
	want := map[copyKey]*unstructured.Unstructured{}
	present := map[copyKey]bool{}
	for i := range items {
		u := &items[i]
		present[keyOf(u)] = true
		if !isHomeObject(u) {
			continue
		}
		k := keyOf(u)
		if err := s.m.homes.learnFromPeer(ctx, s.peer.name, k.shard); err != nil {
			return err
		}
		if home, ok := s.m.homeOf(k.shard); ok && home == s.peer.name {
			want[k] = u
		}
	}
	localList, err := s.m.local.Cluster(kcpcache.Wildcard, kcpcache.Wildcard).Resource(s.gvr).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing the local copies: %w", err)
	}
	have := map[copyKey]*unstructured.Unstructured{}
	var fromOtherEpoch []string
	for i := range localList.Items {
		u := &localList.Items[i]
		a := u.GetAnnotations()
		shard := a[kcpcache.AnnotationShard]
		home, followed := s.m.homeOf(shard)
		if isHomeObject(u) {
			// Written here by its shard while this cache held its claim.
			// Only an explicit move of the shard's home to the peer (a
			// claim of a higher generation, moving.go) makes these objects
			// the peer's to replace or delete.
			if followed && home == s.peer.name {
				have[keyOf(u)] = u
			}
			continue
		}
		// A copy of the peer's: kept as it is while its shard's claim is
		// unknown or in conflict, and while the shard's home is this cache
		// (adopted: the shard's own push replaces the copies).
		if a[kcpcache.AnnotationHome] != s.peer.name || !followed || home == s.m.cfg.Self {
			continue
		}
		have[keyOf(u)] = u
		if e := a[kcpcache.AnnotationHomeEpoch]; e != "" && e != s.listEpoch {
			fromOtherEpoch = append(fromOtherEpoch, a[kcpcache.AnnotationShard])
		}
	}
	if len(fromOtherEpoch) > 0 {
		s.peer.holdHome(ctx, s.m, s.listEpoch, fromOtherEpoch...)
	}
	for k, u := range want {
		if s.peer.holds.isHeld(k.shard) {
			continue
		}
		existing, ok := have[k]
		if ok && sameContent(existing, s.desiredCopy(u)) {
			continue
		}
		if err := s.applyPeerObject(ctx, u, !ok); err != nil {
			return err
		}
	}
	for k, u := range have {
		if _, ok := want[k]; ok || s.peer.holds.isHeld(k.shard) {
			continue
		}
		// A copy of a shard homed at the peer that the peer no longer
		// holds, an object of a shard that moved to the peer, or a copy of
		// a shard that moved from the peer to another cache, once the peer
		// no longer holds it at all (the new home's stream brings its own).
		home, ok := s.m.homeOf(k.shard)
		if !ok || (home != s.peer.name && (isHomeObject(u) || present[k])) {
			continue
		}
		if err := s.deleteCopy(ctx, k, u.GetUID()); err != nil {
			return err
		}
	}
	objects.WithLabelValues(s.peer.name, s.gvr.GroupResource().String()).Set(float64(len(want)))
	return nil
}

// applyPeerObject writes the copy of the peer's object u here, or deletes
// the copy when the peer no longer holds u as its home (it became a mirror
// there: the shard's home moved).
//
// isNew says the copy is likely missing (a watch ADDED event, a list item
// with no copy here): it is created first, updated only if it exists, which
// spares a new object the round trip of an update answered NotFound.
func (s *stream) applyPeerObject(ctx context.Context, u *unstructured.Unstructured, isNew bool) error {
	k := keyOf(u)
	if s.peer.holds.isHeld(k.shard) {
		return nil
	}
	if !isHomeObject(u) {
		if u.GetAnnotations()[kcpcache.AnnotationHome] == s.m.cfg.Self || k.shard == "" {
			return nil
		}
		// The peer holds the object as a copy now: the shard's home moved
		// away from the peer. Only then are the copies from the peer
		// deleted (the new home's stream brings its own).
		if home, ok := s.m.homeOf(k.shard); !ok || home == s.peer.name || home == s.m.cfg.Self {
			return nil
		}
		// Only copies whose home is the peer are ours to delete.
		existing, err := s.partitionClient(k).Get(ctx, k.name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		} else if err != nil {
			return fmt.Errorf("reading the local copy %v: %w", k, err)
		}
		if existing.GetAnnotations()[kcpcache.AnnotationHome] != s.peer.name {
			return nil
		}
		return s.deleteCopy(ctx, k, existing.GetUID())
	}
	if err := s.m.homes.learnFromPeer(ctx, s.peer.name, k.shard); err != nil {
		return err
	}
	if home, ok := s.m.homeOf(k.shard); !ok || home != s.peer.name {
		// Not the peer's shard by the claims (another home, a conflict):
		// the peer's object is not taken.
		return nil
	}
	desired := s.desiredCopy(u)
	r := s.partitionClient(k)
	if isNew {
		_, err := r.Create(ctx, desired, metav1.CreateOptions{})
		switch {
		case err == nil:
			writes.WithLabelValues(s.peer.name, "create").Inc()
			return nil
		case !apierrors.IsAlreadyExists(err):
			return fmt.Errorf("creating the copy %v: %w", k, err)
		}
	}
	_, err := r.Update(ctx, desired, metav1.UpdateOptions{})
	switch {
	case err == nil:
		writes.WithLabelValues(s.peer.name, "update").Inc()
		return nil
	case apierrors.IsNotFound(err):
		if _, err := r.Create(ctx, desired, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating the copy %v: %w", k, err)
		}
		writes.WithLabelValues(s.peer.name, "create").Inc()
		return nil
	case apierrors.IsInvalid(err) || apierrors.IsConflict(err):
		// The name was deleted and created again at the home (another
		// uid): replace the copy.
		klog.FromContext(ctx).V(4).Info("Replacing a copy", "key", k, "err", err)
		if err := r.Delete(ctx, k.name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting the copy %v to replace it: %w", k, err)
		}
		if _, err := r.Create(ctx, desired, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating the copy %v again: %w", k, err)
		}
		writes.WithLabelValues(s.peer.name, "replace").Inc()
		return nil
	default:
		return fmt.Errorf("updating the copy %v: %w", k, err)
	}
}

// applyPeerDeletion deletes the copy of an object the peer deleted.
func (s *stream) applyPeerDeletion(ctx context.Context, u *unstructured.Unstructured) error {
	k := keyOf(u)
	if !isHomeObject(u) || s.peer.holds.isHeld(k.shard) {
		return nil
	}
	if home, ok := s.m.homeOf(k.shard); !ok || home == s.m.cfg.Self {
		return nil
	}
	return s.deleteCopy(ctx, keyOf(u), u.GetUID())
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
	writes.WithLabelValues(s.peer.name, "delete").Inc()
	return nil
}

// sameContent compares a stored copy with the desired one in what the
// mirror controls: everything but the server's bookkeeping (resourceVersion,
// generation, managed fields) and the home's resourceVersion, which moves
// with every write at the home even when the copy would not change.
func sameContent(stored, desired *unstructured.Unstructured) bool {
	return reflect.DeepEqual(comparable(stored), comparable(desired))
}

func comparable(u *unstructured.Unstructured) map[string]interface{} {
	c := u.DeepCopy()
	c.SetResourceVersion("")
	c.SetGeneration(0)
	c.SetManagedFields(nil)
	a := c.GetAnnotations()
	delete(a, kcpcache.AnnotationHomeResourceVersion)
	c.SetAnnotations(a)
	return c.Object
}
