package mirror

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"

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
	// home is the object's home annotation; homeObject is set for an object
	// written here by its shard.
	home       string
	homeObject bool
	epoch      string
	content    [sha256.Size]byte
}

// converge makes the copies of this type whose home is the peer exactly the
// peer's home objects in the list that starts with first (more fetches the
// next page of a continue token). Only the shards whose claim the peer
// holds are taken (homes.go): the peer's whole table is learnt first, and a
// shard met later whose claim is still unknown is asked of the peer, so
// that nothing the peer holds as home is skipped silently.
func (s *stream) converge(ctx context.Context, first *unstructured.UnstructuredList, more func(ctx context.Context, continueToken string) (*unstructured.UnstructuredList, error)) error {
	if failed, _ := s.m.homes.askPeers(ctx, "", s.peer.name); failed[s.peer.name] != nil {
		return fmt.Errorf("reading the homes table of peer %q: %w", s.peer.name, failed[s.peer.name])
	}
	have, err := s.localCopies(ctx)
	if err != nil {
		return err
	}
	want := map[copyKey]bool{}
	present := map[copyKey]bool{}
	for page := first; ; {
		for i := range page.Items {
			u := &page.Items[i]
			k := keyOf(u)
			present[k] = true
			if !isHomeObject(u) {
				continue
			}
			if err := s.m.homes.learnFromPeer(ctx, s.peer.name, k.shard); err != nil {
				return err
			}
			if home, ok := s.m.homeOf(k.shard); !ok || home != s.peer.name {
				continue
			}
			want[k] = true
			if s.peer.holds.isHeld(k.shard) {
				continue
			}
			existing, ok := have[k]
			ok = ok && s.replaceable(existing, k.shard)
			if ok && existing.content == contentOf(s.desiredCopy(u)) {
				continue
			}
			if err := s.applyPeerObject(ctx, u, !ok); err != nil {
				return err
			}
		}
		token := page.GetContinue()
		if token == "" {
			break
		}
		next, err := more(ctx, token)
		if err != nil {
			return fmt.Errorf("listing at the peer: %w", err)
		}
		page = next
	}
	for k, c := range have {
		if want[k] || !s.replaceable(c, k.shard) || s.peer.holds.isHeld(k.shard) {
			continue
		}
		// A copy of a shard homed at the peer that the peer no longer
		// holds, an object of a shard that moved to the peer, or a copy of
		// a shard that moved from the peer to another cache, once the peer
		// no longer holds it at all (the new home's stream brings its own).
		home, ok := s.m.homeOf(k.shard)
		if !ok || (home != s.peer.name && (c.homeObject || present[k])) {
			continue
		}
		if err := s.deleteCopy(ctx, k, c.uid); err != nil {
			return err
		}
	}
	objects.WithLabelValues(s.peer.name, s.gvr.GroupResource().String()).Set(float64(len(want)))
	return nil
}

// localCopies reads every local object of the type, a page at a time, and
// holds the partitions of the copies that came from another epoch of the
// peer than the list's (the peer was restored: restored.go).
func (s *stream) localCopies(ctx context.Context) (map[copyKey]localCopy, error) {
	have := map[copyKey]localCopy{}
	var fromOtherEpoch []string
	res := s.m.local.Cluster(kcpcache.Wildcard, kcpcache.Wildcard).Resource(s.gvr)
	for token := ""; ; {
		page, err := res.List(ctx, metav1.ListOptions{Limit: listPageSize, Continue: token})
		if err != nil {
			return nil, fmt.Errorf("listing the local copies: %w", err)
		}
		for i := range page.Items {
			u := &page.Items[i]
			a := u.GetAnnotations()
			c := localCopy{uid: u.GetUID(), home: a[kcpcache.AnnotationHome], homeObject: isHomeObject(u), epoch: a[kcpcache.AnnotationHomeEpoch]}
			k := keyOf(u)
			if s.replaceable(c, k.shard) {
				// Only what may be the peer's is compared: a digest left
				// empty (a claim learnt later) costs a write, not a miss.
				c.content = contentOf(u)
				if !c.homeObject && c.epoch != "" && c.epoch != s.listEpoch {
					fromOtherEpoch = append(fromOtherEpoch, k.shard)
				}
			}
			have[k] = c
		}
		if token = page.GetContinue(); token == "" {
			break
		}
	}
	if len(fromOtherEpoch) > 0 {
		s.peer.holdHome(ctx, s.m, s.listEpoch, fromOtherEpoch...)
	}
	return have, nil
}

// replaceable reports whether the local object c of shard is the peer's to
// replace or delete, by the claims known now. An object written here by its
// shard while this cache held its claim is, only once the shard's home
// explicitly moved to the peer (a claim of a higher generation, moving.go).
// A copy of the peer's is kept as it is while its shard's claim is unknown
// or in conflict, and while the shard's home is this cache (adopted: the
// shard's own push replaces the copies).
func (s *stream) replaceable(c localCopy, shard string) bool {
	home, followed := s.m.homeOf(shard)
	if c.homeObject {
		return followed && home == s.peer.name
	}
	return c.home == s.peer.name && followed && home != s.m.cfg.Self
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

// contentOf is a digest of what the mirror controls in a copy: everything
// but the server's bookkeeping (resourceVersion, generation, managed
// fields) and the home's resourceVersion, which moves with every write at
// the home even when the copy would not change. Two copies with the same
// digest need no write; JSON encodes maps in key order, so equal content
// has one encoding.
func contentOf(u *unstructured.Unstructured) [sha256.Size]byte {
	b, err := json.Marshal(comparable(u))
	if err != nil {
		// Unstructured content came from JSON; a value that cannot be
		// encoded again never equals another, so the copy is written.
		return sha256.Sum256([]byte(err.Error() + string(u.GetUID())))
	}
	return sha256.Sum256(b)
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
