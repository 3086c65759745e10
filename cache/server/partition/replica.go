package partition

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

// A copy's field ownership (metadata.managedFields) is its origin's: the
// origin's server recorded which managers own which fields, and the copy
// mirrors that record, so that it equals its origin field by field (kcp's
// replication compares copies with their originals, managedFields included).
// Upstream's field manager, which runs before storage, would instead record
// the client writing the copy as the owner of every field it created or
// changed. So a create or update that sends the object keeps the
// managedFields as sent; one that sends none keeps the stored copy's, as
// upstream does for clients that do not know managedFields. Server-side
// apply carries no origin metadata: its result is upstream's (conflicts with
// the origin's managers, --force-conflicts taking fields over).
//
// The managedFields cost memory only as bytes: the watch cache holds a
// stored object's metadata unparsed (package opaque).

// RestoreOnCreate puts the origin's identity and field ownership back on a
// copy being created, after upstream's registry filled in its own (the data
// plane's strategy calls it, so that a dry run answers as the real create).
// Objects of the system partition are not copies.
func RestoreOnCreate(ctx context.Context, obj metav1.Object) {
	m, ok := OriginMetaFrom(ctx)
	if sc, scoped := kcpcache.ScopeFrom(ctx); !ok || !scoped || sc.IsSystem() {
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
	obj.SetManagedFields(m.ManagedFields)
}

// RestoreOnUpdate keeps a copy's generation under the origin's control: the
// value from the request when it sent one, otherwise the stored one, so that a
// spec change on the copy never bumps it. Field ownership is the request's
// when it sent any, otherwise the stored copy's (see above). Storage calls
// it after upstream's validation, which refuses a generation lower than the
// stored one; the data plane calls it on a dry run's answer, which storage
// never sees. Objects of the system partition are not copies.
func RestoreOnUpdate(ctx context.Context, existing, updated metav1.Object) {
	if sc, scoped := kcpcache.ScopeFrom(ctx); !scoped || sc.IsSystem() {
		return
	}
	if existing.GetResourceVersion() == "" {
		// Nothing was stored: an update that creates (a server-side apply
		// of a new object), which RestoreOnCreate has prepared.
		return
	}
	m, ok := OriginMetaFrom(ctx)
	if ok && m.Generation > 0 {
		updated.SetGeneration(m.Generation)
	} else {
		updated.SetGeneration(existing.GetGeneration())
	}
	switch {
	case !ok:
		// Server-side apply or a JSON patch: upstream's field manager decided.
	case m.SentManagedFields:
		updated.SetManagedFields(m.ManagedFields)
	default:
		updated.SetManagedFields(existing.GetManagedFields())
	}
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

// OwnershipFromOrigin reports whether the write in ctx gets its
// origin's field ownership (see RestoreOnCreate and RestoreOnUpdate): a
// write with an origin body into a shard's partition. Upstream's field
// manager's record of such a write would be thrown away, so the data plane
// does not compute it.
func OwnershipFromOrigin(ctx context.Context) bool {
	if _, ok := OriginMetaFrom(ctx); !ok {
		return false
	}
	sc, ok := kcpcache.ScopeFrom(ctx)
	return ok && !sc.IsSystem()
}
