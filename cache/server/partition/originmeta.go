package partition

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

// OriginMeta is the metadata a pushed copy keeps from its origin. Upstream
// resets these fields before admission (rest.WipeObjectMetaSystemFields and
// FillObjectMetaSystemFields on create; the custom resource strategy bumps
// generation on update), so the HTTP layer reads them from the request body
// and storage puts them back.
type OriginMeta struct {
	UID               types.UID
	CreationTimestamp metav1.Time
	Generation        int64
}

var originMetaKey = kcpcache.NewContextKey[OriginMeta]("origin metadata")

// WithOriginMeta returns a context carrying the origin metadata of the object
// in the request body.
func WithOriginMeta(ctx context.Context, m OriginMeta) context.Context {
	return originMetaKey.With(ctx, m)
}

func originMetaFrom(ctx context.Context) (OriginMeta, bool) { return originMetaKey.From(ctx) }
