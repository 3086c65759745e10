package replication

import (
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

// localExport is an apiexport as the shard's own server returns it.
func localExport(mutate ...func(*unstructured.Unstructured)) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": "apis.kcp.io/v1alpha1",
		"kind":       "APIExport",
		"metadata": map[string]interface{}{
			"name":              "export",
			"uid":               "uid-1",
			"resourceVersion":   "42",
			"generation":        int64(3),
			"creationTimestamp": "2026-01-02T03:04:05Z",
			"selfLink":          "/apis/apis.kcp.io/v1alpha1/apiexports/export",
			"managedFields":     originManagedFields(),
			"annotations": map[string]interface{}{
				kcpcache.AnnotationCluster: "root",
				kcpcache.AnnotationPath:    "root:org",
			},
			"labels": map[string]interface{}{"team": "a"},
		},
		"spec":   map[string]interface{}{"identity": map[string]interface{}{"hash": "abc"}, "replicas": int64(2)},
		"status": map[string]interface{}{"phase": "Ready"},
	}}
	for _, m := range mutate {
		m(u)
	}
	return u
}

// originManagedFields are the field ownership the shard's server recorded.
func originManagedFields() []interface{} {
	return []interface{}{
		map[string]interface{}{"manager": "kubectl-edit", "operation": "Update", "apiVersion": "apis.kcp.io/v1alpha1", "time": "2026-01-02T03:04:05Z", "fieldsType": "FieldsV1",
			"fieldsV1": map[string]interface{}{"f:spec": map[string]interface{}{".": map[string]interface{}{}, "f:replicas": map[string]interface{}{}}}},
		map[string]interface{}{"manager": "kcp", "operation": "Update", "apiVersion": "apis.kcp.io/v1alpha1", "time": "2026-01-02T03:04:06Z", "fieldsType": "FieldsV1", "subresource": "status",
			"fieldsV1": map[string]interface{}{"f:status": map[string]interface{}{"f:phase": map[string]interface{}{}}}},
	}
}

func withManagedFields(mf []interface{}) func(*unstructured.Unstructured) {
	return func(u *unstructured.Unstructured) {
		_ = unstructured.SetNestedField(u.Object, mf, "metadata", "managedFields")
	}
}

// cachedCopy is the copy of localExport() as the cache serves it after a
// create by the controller, written out by hand: the origin's content,
// identity, generation and managedFields, the cache's own resourceVersion,
// and the placement and provenance annotations.
func cachedCopy(mutate ...func(*unstructured.Unstructured)) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": "apis.kcp.io/v1alpha1",
		"kind":       "APIExport",
		"metadata": map[string]interface{}{
			"name":              "export",
			"uid":               "uid-1",
			"resourceVersion":   "1007",
			"generation":        int64(3),
			"creationTimestamp": "2026-01-02T03:04:05Z",
			"managedFields":     originManagedFields(),
			"annotations": map[string]interface{}{
				kcpcache.AnnotationCluster:                 "root",
				kcpcache.AnnotationPath:                    "root:org",
				kcpcache.AnnotationShard:                   "amber",
				kcpcache.AnnotationOriginalResourceVersion: "42",
				kcpcache.AnnotationOriginalResourceUID:     "uid-1",
			},
			"labels": map[string]interface{}{"team": "a"},
		},
		"spec":   map[string]interface{}{"identity": map[string]interface{}{"hash": "abc"}, "replicas": int64(2)},
		"status": map[string]interface{}{"phase": "Ready"},
	}}
	for _, m := range mutate {
		m(u)
	}
	return u
}

func withSpec(key string, v interface{}) func(*unstructured.Unstructured) {
	return func(u *unstructured.Unstructured) { _ = unstructured.SetNestedField(u.Object, v, "spec", key) }
}

func withAnnotation(k, v string) func(*unstructured.Unstructured) {
	return func(u *unstructured.Unstructured) {
		a := u.GetAnnotations()
		if a == nil {
			a = map[string]string{}
		}
		a[k] = v
		u.SetAnnotations(a)
	}
}

// What replication does for each state of a local object and its copy.
func TestDecisionForEachStateOfObjectAndCopy(t *testing.T) {
	deleting := func(finalizers ...string) func(*unstructured.Unstructured) {
		return func(u *unstructured.Unstructured) {
			_ = unstructured.SetNestedField(u.Object, "2026-02-02T00:00:00Z", "metadata", "deletionTimestamp")
			u.SetFinalizers(finalizers)
		}
	}
	tests := []struct {
		name          string
		local, cached *unstructured.Unstructured
		want          action
		wantDeleteUID types.UID
		wantRegressed bool
	}{
		{name: "nothing on either side", want: actionNone},
		{name: "local gone: delete the copy with a UID precondition", cached: cachedCopy(), want: actionDelete, wantDeleteUID: "uid-1"},
		{name: "local deleting without finalizers: delete the copy", local: localExport(deleting()), cached: cachedCopy(), want: actionDelete, wantDeleteUID: "uid-1"},
		{name: "local deleting without finalizers and no copy", local: localExport(deleting()), want: actionNone},
		{name: "local deleting with finalizers: the copy stays", local: localExport(deleting("kcp.io/hold")), cached: cachedCopy(withFinalizers("kcp.io/hold")), want: actionNone},
		{name: "copy missing: create", local: localExport(), want: actionCreate},
		{name: "copy equal but for server-owned fields", local: localExport(), cached: cachedCopy(
			withAnnotation(kcpcache.AnnotationOriginalResourceVersion, "41"),
			withAnnotation(kcpcache.AnnotationCluster, "root"),
			func(u *unstructured.Unstructured) { u.SetCreationTimestamp(u.GetCreationTimestamp()) },
		), want: actionNone},
		{name: "local changed spec: update", local: localExport(withSpec("replicas", int64(3))), cached: cachedCopy(), want: actionUpdate},
		{name: "local changed status: update", local: localExport(func(u *unstructured.Unstructured) {
			_ = unstructured.SetNestedField(u.Object, "Broken", "status", "phase")
		}), cached: cachedCopy(), want: actionUpdate},
		{name: "copy spec tampered with: update", local: localExport(), cached: cachedCopy(withSpec("identity", "stolen")), want: actionUpdate},
		{name: "copy generation tampered with: update", local: localExport(), cached: cachedCopy(func(u *unstructured.Unstructured) { u.SetGeneration(9) }), want: actionUpdate},
		{name: "copy got a label: update", local: localExport(), cached: cachedCopy(func(u *unstructured.Unstructured) {
			u.SetLabels(map[string]string{"team": "a", "evil": "yes"})
		}), want: actionUpdate},
		{name: "local field ownership changed: update", local: localExport(withManagedFields(originManagedFields()[:1])), cached: cachedCopy(), want: actionUpdate},
		{name: "copy field ownership tampered with: update", local: localExport(), cached: cachedCopy(withManagedFields(append(originManagedFields(), map[string]interface{}{"manager": "intruder", "operation": "Apply"}))), want: actionUpdate},
		{name: "copy lost its field ownership: update", local: localExport(), cached: cachedCopy(withManagedFields(nil)), want: actionUpdate},
		{name: "local without field ownership, copy with: update", local: localExport(withManagedFields(nil)), cached: cachedCopy(), want: actionUpdate},
		{name: "neither has field ownership", local: localExport(withManagedFields(nil)), cached: cachedCopy(func(u *unstructured.Unstructured) {
			unstructured.RemoveNestedField(u.Object, "metadata", "managedFields")
		}), want: actionNone},
		{name: "copy got an annotation: update", local: localExport(), cached: cachedCopy(withAnnotation("note", "x")), want: actionUpdate},
		{name: "copy lost the path annotation: update", local: localExport(), cached: cachedCopy(func(u *unstructured.Unstructured) {
			a := u.GetAnnotations()
			delete(a, kcpcache.AnnotationPath)
			u.SetAnnotations(a)
		}), want: actionUpdate},
		{name: "copy of an older incarnation: recreate", local: localExport(func(u *unstructured.Unstructured) { u.SetUID("uid-2") }), cached: cachedCopy(), want: actionRecreate, wantDeleteUID: "uid-1"},
		{name: "local without a UID never forces a recreate", local: localExport(func(u *unstructured.Unstructured) { u.SetUID("") }), cached: cachedCopy(
			withAnnotation(kcpcache.AnnotationOriginalResourceUID, ""),
		), want: actionNone},
		{name: "empty and missing metadata collections are the same", local: localExport(func(u *unstructured.Unstructured) {
			_ = unstructured.SetNestedField(u.Object, map[string]interface{}{}, "metadata", "labels")
			u.SetLabels(nil)
			_ = unstructured.SetNestedSlice(u.Object, []interface{}{}, "metadata", "finalizers")
		}), cached: cachedCopy(func(u *unstructured.Unstructured) { u.SetLabels(nil) }), want: actionNone},
		{name: "numbers decoded differently are the same", local: localExport(withSpec("replicas", float64(2))), cached: cachedCopy(), want: actionNone},
		{name: "origin went back in time, same content: update to record its version", local: localExport(), cached: cachedCopy(
			withAnnotation(kcpcache.AnnotationOriginalResourceVersion, "50"),
		), want: actionUpdate, wantRegressed: true},
		{name: "origin went back in time, older content: update", local: localExport(withSpec("replicas", int64(1))), cached: cachedCopy(
			withAnnotation(kcpcache.AnnotationOriginalResourceVersion, "50"),
		), want: actionUpdate, wantRegressed: true},
		{name: "resourceVersions that are not numbers are not ordered", local: localExport(func(u *unstructured.Unstructured) { u.SetResourceVersion("b") }), cached: cachedCopy(
			withAnnotation(kcpcache.AnnotationOriginalResourceVersion, "c"),
		), want: actionNone},
		{name: "an older incarnation is no regression", local: localExport(func(u *unstructured.Unstructured) { u.SetUID("uid-2") }), cached: cachedCopy(
			withAnnotation(kcpcache.AnnotationOriginalResourceVersion, "50"),
		), want: actionRecreate, wantDeleteUID: "uid-1"},
		{name: "local without generation lets the server pick", local: localExport(func(u *unstructured.Unstructured) {
			unstructured.RemoveNestedField(u.Object, "metadata", "generation")
		}), cached: cachedCopy(func(u *unstructured.Unstructured) { u.SetGeneration(1) }), want: actionNone},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var localBefore, cachedBefore *unstructured.Unstructured
			if tt.local != nil {
				localBefore = tt.local.DeepCopy()
			}
			if tt.cached != nil {
				cachedBefore = tt.cached.DeepCopy()
			}
			d := decide("amber", tt.local, tt.cached)
			if d.action != tt.want {
				t.Fatalf("action = %s (%s), want %s", d.action, d.reason, tt.want)
			}
			if d.originRegressed != tt.wantRegressed {
				t.Errorf("originRegressed = %v, want %v", d.originRegressed, tt.wantRegressed)
			}
			if d.deleteUID != tt.wantDeleteUID {
				t.Errorf("delete precondition UID = %q, want %q", d.deleteUID, tt.wantDeleteUID)
			}
			if (d.object != nil) != (tt.want == actionCreate || tt.want == actionUpdate || tt.want == actionRecreate) {
				t.Errorf("object = %v for action %s", d.object, d.action)
			}
			// Every field, not only those decide compares.
			if tt.local != nil && !reflect.DeepEqual(tt.local.Object, localBefore.Object) || tt.cached != nil && !reflect.DeepEqual(tt.cached.Object, cachedBefore.Object) {
				t.Errorf("decide modified its input")
			}
			if d.object != nil {
				checkWritable(t, d, tt.local, tt.cached)
			}
		})
	}
}

func withFinalizers(f ...string) func(*unstructured.Unstructured) {
	return func(u *unstructured.Unstructured) { u.SetFinalizers(f) }
}

// checkWritable checks what a create or update sends to the cache.
func checkWritable(t *testing.T, d decision, local, cached *unstructured.Unstructured) {
	t.Helper()
	o := d.object
	a := o.GetAnnotations()
	if a[kcpcache.AnnotationShard] != "amber" || a[kcpcache.AnnotationCluster] != "root" {
		t.Errorf("copy is not placed in amber/root: %v", a)
	}
	if a[kcpcache.AnnotationOriginalResourceVersion] != local.GetResourceVersion() {
		t.Errorf("original-resource-version = %q, want %q (refreshed on every write)", a[kcpcache.AnnotationOriginalResourceVersion], local.GetResourceVersion())
	}
	if a[kcpcache.AnnotationOriginalResourceUID] != string(local.GetUID()) {
		t.Errorf("original-resource-UID = %q, want %q", a[kcpcache.AnnotationOriginalResourceUID], local.GetUID())
	}
	if a[kcpcache.AnnotationPath] != "root:org" {
		t.Errorf("the origin's own annotations must be kept, got %v", a)
	}
	if o.GetSelfLink() != "" || o.GetDeletionTimestamp() != nil {
		t.Errorf("origin-owned metadata leaked into the copy: %v", o.Object["metadata"])
	}
	// The origin's field ownership, or an explicit empty list that asks the
	// server for none (an update without the field would keep the copy's).
	wantMF, _, _ := unstructured.NestedFieldNoCopy(local.Object, "metadata", "managedFields")
	if mf, ok := wantMF.([]interface{}); !ok || len(mf) == 0 {
		wantMF = []interface{}{}
	}
	if got, _, _ := unstructured.NestedFieldNoCopy(o.Object, "metadata", "managedFields"); !reflect.DeepEqual(got, wantMF) {
		t.Errorf("the copy carries managedFields %v, want %v", got, wantMF)
	}
	created, localCreated := o.GetCreationTimestamp(), local.GetCreationTimestamp()
	if o.GetGeneration() != local.GetGeneration() || !created.Equal(&localCreated) {
		t.Errorf("copy must keep the origin's generation and creationTimestamp")
	}
	switch d.action {
	case actionCreate, actionRecreate:
		if o.GetResourceVersion() != "" {
			t.Errorf("a create must not carry a resourceVersion, got %q", o.GetResourceVersion())
		}
		if o.GetUID() != local.GetUID() {
			t.Errorf("a create must carry the origin's UID %q, got %q", local.GetUID(), o.GetUID())
		}
	case actionUpdate:
		if o.GetResourceVersion() != cached.GetResourceVersion() || o.GetUID() != cached.GetUID() {
			t.Errorf("an update must carry the copy's resourceVersion and UID, got %q/%q", o.GetResourceVersion(), o.GetUID())
		}
		for _, field := range []string{"spec", "status"} {
			if !reflect.DeepEqual(o.Object[field], local.Object[field]) {
				t.Errorf("the update carries %s %v, want the local %v", field, o.Object[field], local.Object[field])
			}
		}
		if !reflect.DeepEqual(o.GetLabels(), local.GetLabels()) {
			t.Errorf("the update carries labels %v, want the local %v", o.GetLabels(), local.GetLabels())
		}
	}
}

func TestDesiredCopyReplacesForeignPlacementAndProvenance(t *testing.T) {
	local := localExport(
		withAnnotation(kcpcache.AnnotationShard, "somewhere-else"),
		withAnnotation(kcpcache.AnnotationOriginalResourceVersion, "1"),
		withAnnotation(kcpcache.AnnotationOriginalResourceUID, "other"),
	)
	got := desiredCopy("amber", local).GetAnnotations()
	if got[kcpcache.AnnotationShard] != "amber" || got[kcpcache.AnnotationOriginalResourceVersion] != "42" || got[kcpcache.AnnotationOriginalResourceUID] != "uid-1" {
		t.Fatalf("annotations = %v", got)
	}
}
