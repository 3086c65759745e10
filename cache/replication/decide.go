package replication

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strconv"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

// action is what one reconcile does to a copy. Its value is the result label
// of the reconciles metric.
type action string

const (
	actionNone     action = "unchanged"
	actionCreate   action = "created"
	actionUpdate   action = "updated"
	actionDelete   action = "deleted"
	actionRecreate action = "recreated"
)

// decision is the outcome of decide: what to do and with what.
type decision struct {
	action action
	// object is the copy to write for create, update and recreate. For an
	// update it carries the current copy's resourceVersion, so a concurrent
	// write to the copy makes the update fail with a conflict.
	object *unstructured.Unstructured
	// deleteUID is the UID precondition of a delete or recreate: the copy we
	// looked at, and not one written since, is the one removed.
	deleteUID types.UID
	// reason says why, for logs.
	reason string
	// originRegressed is set when the copy records a newer origin
	// resourceVersion than the local object has: the shard went back in
	// time. The copy is updated to the local object all the same.
	originRegressed bool
}

// originOwnedFields are metadata fields of a local object that describe its
// life on the shard rather than its content; a copy never carries the
// origin's. deletionTimestamp cannot be written through the API at all.
// managedFields are not among them: a copy carries its origin's field
// ownership, as kcp's copies do (kcp compares a copy with its original field
// by field, managedFields included), and the cache server keeps them as sent.
var originOwnedFields = []string{"resourceVersion", "selfLink", "deletionTimestamp", "deletionGracePeriodSeconds"}

// comparedAwayFields are metadata fields ignored when a copy is compared
// with its desired state: the cache server owns them (resourceVersion,
// selfLink), identity is checked separately (uid), or an update could not
// change them anyway (creationTimestamp, deletion fields), so a difference
// there must not cause an endless series of updates.
var comparedAwayFields = []string{"resourceVersion", "uid", "selfLink", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds"}

// comparedAwayAnnotations are set by the cache server (shard, cluster) or
// refreshed on every write (provenance). Leaving provenance out of the
// comparison means the copy is rewritten when its content changes, not to
// record a new origin resourceVersion alone.
var comparedAwayAnnotations = []string{
	kcpcache.AnnotationShard,
	kcpcache.AnnotationCluster,
	kcpcache.AnnotationOriginalResourceVersion,
	kcpcache.AnnotationOriginalResourceUID,
}

// decide compares a shard's local object with its copy in the cache and
// returns what brings the copy in line. local is nil when the shard has no
// selected object under the key (missing, filtered out, or in a skipped
// cluster); cached is nil when the cache holds no copy. Neither is modified.
//
// Rules:
//   - no local object, or one being deleted with no finalizers left: delete
//     the copy, if there is one;
//   - no copy: create one (desiredCopy);
//   - a copy with another UID is of an older incarnation of the name: delete
//     it and create a new one, since a copy's UID cannot change in place;
//   - a copy that differs in anything but server-owned fields: update it;
//   - a copy that records a newer origin resourceVersion than the local
//     object has (the shard was restored from a backup): update it, even
//     with the same content, so that it records the origin's current
//     version, and flag the regression.
func decide(shard string, local, cached *unstructured.Unstructured) decision {
	if local == nil || isGone(local) {
		if cached == nil {
			return decision{action: actionNone, reason: "no local object and no copy"}
		}
		reason := "local object is gone"
		if local != nil {
			reason = "local object is being deleted and has no finalizers left"
		}
		return decision{action: actionDelete, deleteUID: cached.GetUID(), reason: reason}
	}
	desired := desiredCopy(shard, local)
	if cached == nil {
		return decision{action: actionCreate, object: desired, reason: "copy is missing"}
	}
	if local.GetUID() != "" && cached.GetUID() != local.GetUID() {
		return decision{action: actionRecreate, object: desired, deleteUID: cached.GetUID(), reason: "copy has another UID"}
	}
	regressed := originRegressed(local, cached)
	if !regressed && sameContent(desired, cached) {
		return decision{action: actionNone, reason: "copy is up to date"}
	}
	desired.SetResourceVersion(cached.GetResourceVersion())
	desired.SetUID(cached.GetUID())
	if regressed {
		return decision{action: actionUpdate, object: desired, reason: "origin went back in time", originRegressed: true}
	}
	return decision{action: actionUpdate, object: desired, reason: "copy differs"}
}

// originRegressed reports whether the copy records a newer origin
// resourceVersion than local has. kcp's resourceVersions are etcd revisions
// (decimal integers) and grow with every write, so an object whose version
// is lower than one its copy was made from is an older state of it; other
// forms are not ordered and never count.
func originRegressed(local, cached *unstructured.Unstructured) bool {
	have, err := strconv.ParseUint(local.GetResourceVersion(), 10, 64)
	if err != nil {
		return false
	}
	recorded, err := strconv.ParseUint(cached.GetAnnotations()[kcpcache.AnnotationOriginalResourceVersion], 10, 64)
	return err == nil && have < recorded
}

// isGone is true for a local object that is being deleted and that nothing
// holds any more: it is about to vanish, so its copy can go now.
func isGone(local *unstructured.Unstructured) bool {
	return local.GetDeletionTimestamp() != nil && len(local.GetFinalizers()) == 0
}

// desiredCopy returns the copy of local that the shard's partition should
// hold: the whole object with the origin's uid, creationTimestamp,
// generation and managedFields, without what describes its life on the
// shard, and with the shard and provenance annotations set. Whatever the
// shard's own server put in the annotations this package owns is replaced.
func desiredCopy(shard string, local *unstructured.Unstructured) *unstructured.Unstructured {
	out := local.DeepCopy()
	for _, f := range originOwnedFields {
		unstructured.RemoveNestedField(out.Object, "metadata", f)
	}
	if mf, _, _ := unstructured.NestedFieldNoCopy(out.Object, "metadata", "managedFields"); isEmpty(mf) {
		// An update without managedFields keeps the copy's; an empty list
		// asks the server for none, as the origin has.
		_ = unstructured.SetNestedSlice(out.Object, []interface{}{}, "metadata", "managedFields")
	}
	annotations := out.GetAnnotations()
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[kcpcache.AnnotationShard] = shard
	annotations[kcpcache.AnnotationOriginalResourceVersion] = local.GetResourceVersion()
	if uid := local.GetUID(); uid != "" {
		annotations[kcpcache.AnnotationOriginalResourceUID] = string(uid)
	} else {
		delete(annotations, kcpcache.AnnotationOriginalResourceUID)
	}
	out.SetAnnotations(annotations)
	return out
}

// sameContent reports whether the copy already holds desired, ignoring what
// the server owns (comparedAwayFields, comparedAwayAnnotations). A desired
// object without a generation lets the server pick one, so the generation
// is then ignored too.
func sameContent(desired, cached *unstructured.Unstructured) bool {
	ignoreGeneration := desired.GetGeneration() == 0
	a := comparedContent(desired.Object, ignoreGeneration)
	b := comparedContent(cached.Object, ignoreGeneration)
	if reflect.DeepEqual(a, b) {
		return true
	}
	// Objects decoded differently (a typed local object converted to
	// unstructured holds float64(1) where JSON decoding yields int64(1))
	// are still the same when they serialize the same.
	ja, errA := json.Marshal(a)
	jb, errB := json.Marshal(b)
	return errA == nil && errB == nil && bytes.Equal(ja, jb)
}

// comparedContent returns a view of obj without the ignored fields and without
// empty metadata collections, which the server may drop. Only the maps on
// the way to what is removed are copied; the rest is shared with obj and
// must not be modified.
func comparedContent(obj map[string]interface{}, ignoreGeneration bool) map[string]interface{} {
	out := make(map[string]interface{}, len(obj))
	for k, v := range obj {
		out[k] = v
	}
	metadata, ok := obj["metadata"].(map[string]interface{})
	if !ok {
		return out
	}
	md := make(map[string]interface{}, len(metadata))
	for k, v := range metadata {
		md[k] = v
	}
	for _, f := range comparedAwayFields {
		delete(md, f)
	}
	if ignoreGeneration {
		delete(md, "generation")
	}
	if annotations, ok := metadata["annotations"].(map[string]interface{}); ok {
		kept := make(map[string]interface{}, len(annotations))
		for k, v := range annotations {
			kept[k] = v
		}
		for _, a := range comparedAwayAnnotations {
			delete(kept, a)
		}
		md["annotations"] = kept
	}
	for _, f := range []string{"annotations", "labels", "finalizers", "ownerReferences", "managedFields"} {
		if isEmpty(md[f]) {
			delete(md, f)
		}
	}
	out["metadata"] = md
	return out
}

// isEmpty is true for a missing field and for an empty map or list.
func isEmpty(v interface{}) bool {
	switch t := v.(type) {
	case nil:
		return true
	case map[string]interface{}:
		return len(t) == 0
	case []interface{}:
		return len(t) == 0
	}
	return false
}
