package opaque

import (
	"k8s.io/apimachinery/pkg/api/equality"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
)

// Upstream compares whole objects with equality.Semantic, which walks them by
// reflection and panics on unexported fields unless the type registers its own
// equality. The generic registry does so on every update: it asks whether an
// update changes nothing but managedFields timestamps (Store.Update calls
// fieldmanager.IgnoreManagedFieldsTimestampsTransformer), which for objects
// with managedFields compares the whole objects. The registration has to
// happen before the first such comparison copies equality.Semantic, hence
// at initialization.
func init() {
	utilruntime.Must(equality.Semantic.AddFunc(semanticallyEqual))
}

// semanticallyEqual reports whether two objects hold the same content:
// apiVersion, kind, the same members besides metadata, and semantically equal
// metadata (complete, however much of it each object has parsed). It is
// strict about managedFields timestamps, so an update that changes only them
// is written, where upstream would skip the write for types it can compare
// ignoring them.
func semanticallyEqual(a, b Object) bool {
	if a.TypeMeta != b.TypeMeta || a.Body() != b.Body() {
		return false
	}
	if ra, rb := a.rawMeta(), b.rawMeta(); ra != "" && ra == rb && a.GetResourceVersion() == b.GetResourceVersion() {
		return true
	}
	return equality.Semantic.DeepEqual(a.full(), b.full())
}
