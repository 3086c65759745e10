package partition

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

// OriginMeta is the metadata a pushed copy keeps from its origin. Upstream
// resets some of these fields before admission (rest.WipeObjectMetaSystemFields
// and FillObjectMetaSystemFields on create; the custom resource strategy bumps
// generation on update) and rewrites managedFields to record the writer (its
// field manager), so the HTTP layer reads them from the request body and
// the data plane's strategy puts them back (RestoreOnCreate,
// RestoreOnUpdate).
//
// A write carries an OriginMeta when its body is an object (create, update,
// merge patch); server-side apply and JSON patches carry none, and upstream's
// field manager decides their managedFields.
type OriginMeta struct {
	UID               types.UID
	CreationTimestamp metav1.Time
	Generation        int64
	// ManagedFields are the body's metadata.managedFields when
	// SentManagedFields is set; nil when the body asked for none (an empty
	// list, or upstream's reset form [{}]).
	ManagedFields []metav1.ManagedFieldsEntry
	// SentManagedFields says the body had metadata.managedFields (not null).
	SentManagedFields bool
}

var originMetaKey = kcpcache.NewContextKey[OriginMeta]("origin metadata")

// WithOriginMeta returns a context carrying the origin metadata of the object
// in the request body.
func WithOriginMeta(ctx context.Context, m OriginMeta) context.Context {
	return originMetaKey.With(ctx, m)
}

// OriginMetaFrom returns the origin metadata the request guard found in the
// request body, if any.
func OriginMetaFrom(ctx context.Context) (OriginMeta, bool) { return originMetaKey.From(ctx) }
