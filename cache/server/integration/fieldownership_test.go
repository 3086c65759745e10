package integration_test

import (
	"context"
	"encoding/json"
	"maps"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
)

// ownedCopy is a copy as a shard pushes it, with the managedFields its
// origin's server recorded: a client's update of the spec, the shard's
// status update in another version through the status subresource, and an
// apply that owns one spec field.
const ownedCopy = `{
  "apiVersion": "apis.kcp.io/v1alpha1",
  "kind": "APIExport",
  "metadata": {
    "name": "owned",
    "uid": "origin-uid-owned",
    "creationTimestamp": "2025-06-01T12:00:00Z",
    "generation": 4,
    "annotations": {"kcp.io/path": "root:org"},
    "managedFields": [
      {"manager": "kubectl-edit", "operation": "Update", "apiVersion": "apis.kcp.io/v1alpha1",
       "time": "2025-06-01T12:00:00Z", "fieldsType": "FieldsV1",
       "fieldsV1": {"f:metadata": {"f:annotations": {".": {}, "f:kcp.io/path": {}}},
                    "f:spec": {".": {}, "f:replicas": {}, "f:schemas": {}}}},
      {"manager": "kcp", "operation": "Update", "apiVersion": "apis.kcp.io/v1alpha2",
       "time": "2025-06-01T12:00:01Z", "fieldsType": "FieldsV1",
       "fieldsV1": {"f:status": {".": {}, "f:identityHash": {}}}, "subresource": "status"},
      {"manager": "ops", "operation": "Apply", "apiVersion": "apis.kcp.io/v1alpha1",
       "time": "2025-06-01T12:00:02Z", "fieldsType": "FieldsV1",
       "fieldsV1": {"f:spec": {"f:owner": {}}}}
    ]
  },
  "spec": {"replicas": 3, "schemas": ["a", "b"], "owner": "ops"},
  "status": {"identityHash": "0123abcd"}
}`

// decodeObject decodes JSON as client-go's dynamic client decodes responses,
// so that a sent object and a read one compare with the same value types.
func decodeObject(t *testing.T, s string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON([]byte(s)); err != nil {
		t.Fatal(err)
	}
	return u
}

// diffFromSent compares a copy read back with what was sent, field by field,
// after removing what the server sets: resourceVersion and the partition
// annotations.
func diffFromSent(sent, got *unstructured.Unstructured) string {
	g := got.DeepCopy()
	unstructured.RemoveNestedField(g.Object, "metadata", "resourceVersion")
	a := g.GetAnnotations()
	delete(a, kcpcache.AnnotationShard)
	delete(a, kcpcache.AnnotationCluster)
	if len(a) == 0 {
		unstructured.RemoveNestedField(g.Object, "metadata", "annotations")
	} else {
		g.SetAnnotations(a)
	}
	return cmp.Diff(sent.Object, g.Object)
}

// readBack checks that every way of reading the copy returns what was sent.
func readBack(ctx context.Context, t *testing.T, r dynamic.ResourceInterface, sent *unstructured.Unstructured) {
	t.Helper()
	got, err := r.Get(ctx, sent.GetName(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if d := diffFromSent(sent, got); d != "" {
		t.Errorf("GET differs from what was sent (-sent +got):\n%s", d)
	}
	list, err := r.List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + sent.GetName()})
	if err != nil || len(list.Items) != 1 {
		t.Fatalf("LIST: %v, %v", err, list)
	}
	if d := diffFromSent(sent, &list.Items[0]); d != "" {
		t.Errorf("LIST differs from what was sent (-sent +got):\n%s", d)
	}
}

func managers(u *unstructured.Unstructured) []string {
	var out []string
	for _, e := range u.GetManagedFields() {
		out = append(out, e.Manager+"/"+string(e.Operation))
	}
	return out
}

func TestCopiesKeepTheManagedFieldsTheyAreSent(t *testing.T) {
	t.Parallel()
	srv := cachetest.StartServer(t)
	ctx := testContext(t)
	copies := dyn(t, srv, "amber", "root").Resource(apiExports)

	sent := decodeObject(t, ownedCopy)
	created, err := copies.Create(ctx, sent.DeepCopy(), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if d := diffFromSent(sent, created); d != "" {
		t.Errorf("POST answered a copy that differs from what was sent (-sent +got):\n%s", d)
	}
	readBack(ctx, t, copies, sent)

	t.Run("an update stores the managedFields it sends", func(t *testing.T) {
		// The origin changed: a new spec, its ownership recorded anew.
		next := decodeObject(t, ownedCopy)
		next.Object["spec"].(map[string]interface{})["replicas"] = int64(5)
		mf := next.GetManagedFields()
		mf[0].Time = &metav1.Time{Time: mf[0].Time.Add(60e9)}
		mf = append(mf, metav1.ManagedFieldsEntry{Manager: "scaler", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "apis.kcp.io/v1alpha1", Time: mf[0].Time, FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:spec":{"f:replicas":{}}}`)}})
		next.SetManagedFields(mf)
		// Round-trip through JSON so that the comparison sees what a
		// client decodes.
		b, err := next.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		next = decodeObject(t, string(b))
		put := next.DeepCopy()
		put.SetResourceVersion(created.GetResourceVersion())
		if _, err := copies.Update(ctx, put, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		readBack(ctx, t, copies, next)
		sent = next
	})

	t.Run("writes without managedFields keep the copy's and record no writer", func(t *testing.T) {
		current, err := copies.Get(ctx, "owned", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		before := current.GetManagedFields()
		current.SetManagedFields(nil)
		current.Object["spec"].(map[string]interface{})["replicas"] = int64(6)
		updated, err := copies.Update(ctx, current, metav1.UpdateOptions{FieldManager: "writer"})
		if err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff(before, updated.GetManagedFields()); d != "" {
			t.Errorf("an update without managedFields changed them (-before +after):\n%s", d)
		}
		patched, err := copies.Patch(ctx, "owned", types.MergePatchType, []byte(`{"spec":{"replicas":7}}`), metav1.PatchOptions{FieldManager: "patcher"})
		if err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff(before, patched.GetManagedFields()); d != "" {
			t.Errorf("a merge patch without managedFields changed them (-before +after):\n%s", d)
		}
		if replicas, _, _ := unstructured.NestedInt64(patched.Object, "spec", "replicas"); replicas != 7 {
			t.Errorf("spec.replicas after the patch = %d, want 7", replicas)
		}
	})

	t.Run("an empty list or upstream's reset form stores none", func(t *testing.T) {
		for _, reset := range []string{`[]`, `[{}]`} {
			if _, err := copies.Create(ctx, sent.DeepCopy(), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatal(err)
			}
			patched, err := copies.Patch(ctx, "owned", types.MergePatchType, []byte(`{"metadata":{"managedFields":`+reset+`}}`), metav1.PatchOptions{})
			if err != nil {
				t.Fatalf("%s: %v", reset, err)
			}
			got, err := copies.Get(ctx, "owned", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if len(patched.GetManagedFields()) != 0 || len(got.GetManagedFields()) != 0 {
				t.Errorf("managedFields %s: the copy kept %v", reset, managers(got))
			}
			if err := copies.Delete(ctx, "owned", metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	})

	t.Run("invalid managedFields are refused and nothing is stored", func(t *testing.T) {
		if _, err := copies.Create(ctx, sent.DeepCopy(), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		before := etcdState(t, srv)
		for name, entry := range map[string]string{
			"unknown operation":    `{"manager":"m","operation":"Replace","apiVersion":"apis.kcp.io/v1alpha1","fieldsType":"FieldsV1","fieldsV1":{}}`,
			"no apiVersion":        `{"manager":"m","operation":"Update","fieldsType":"FieldsV1","fieldsV1":{}}`,
			"undecodable fieldsV1": `{"manager":"m","operation":"Update","apiVersion":"apis.kcp.io/v1alpha1","fieldsType":"FieldsV1","fieldsV1":{"spec":{}}}`,
		} {
			bad := decodeObject(t, ownedCopy)
			bad.SetName("bad")
			var e metav1.ManagedFieldsEntry
			if err := json.Unmarshal([]byte(entry), &e); err != nil {
				t.Fatal(err)
			}
			bad.SetManagedFields([]metav1.ManagedFieldsEntry{e})
			if _, err := copies.Create(ctx, bad, metav1.CreateOptions{}); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "metadata.managedFields") {
				t.Errorf("%s: create answered %v, want 422 naming metadata.managedFields", name, err)
			}
			bad.SetName("owned")
			if _, err := copies.Update(ctx, bad, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) {
				t.Errorf("%s: update answered %v, want 422", name, err)
			}
		}
		if after := etcdState(t, srv); !maps.Equal(before, after) {
			t.Errorf("refused writes changed etcd: %v, then %v", before, after)
		}
	})

	t.Run("server-side apply conflicts with the origin's managers", func(t *testing.T) {
		current, err := copies.Get(ctx, "owned", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		intent := apiExport("owned", map[string]interface{}{"replicas": int64(9)})
		_, err = copies.Apply(ctx, "owned", intent, metav1.ApplyOptions{FieldManager: "intruder"})
		if !apierrors.IsConflict(err) || !strings.Contains(err.Error(), `"kubectl-edit"`) || !strings.Contains(err.Error(), ".spec.replicas") {
			t.Fatalf("an apply taking over spec.replicas answered %v, want a conflict with kubectl-edit over .spec.replicas", err)
		}
		if got, err := copies.Get(ctx, "owned", metav1.GetOptions{}); err != nil || got.GetResourceVersion() != current.GetResourceVersion() {
			t.Fatalf("the refused apply wrote the copy: %v", err)
		}
		// A field nobody owns is free to take.
		free := apiExport("owned", map[string]interface{}{"note": "mine"})
		if _, err := copies.Apply(ctx, "owned", free, metav1.ApplyOptions{FieldManager: "intruder"}); err != nil {
			t.Fatalf("an apply of an unowned field: %v", err)
		}
		forced, err := copies.Apply(ctx, "owned", intent, metav1.ApplyOptions{FieldManager: "intruder", Force: true})
		if err != nil {
			t.Fatalf("a forced apply: %v", err)
		}
		if replicas, _, _ := unstructured.NestedInt64(forced.Object, "spec", "replicas"); replicas != 9 {
			t.Errorf("spec.replicas after the forced apply = %d, want 9", replicas)
		}
		owners := map[string]string{}
		for _, e := range forced.GetManagedFields() {
			owners[e.Manager+"/"+string(e.Operation)] = string(e.FieldsV1.Raw)
		}
		if !strings.Contains(owners["intruder/Apply"], "f:replicas") {
			t.Errorf("after the forced apply the intruder owns %q, want spec.replicas", owners["intruder/Apply"])
		}
		if strings.Contains(owners["kubectl-edit/Update"], "f:replicas") || !strings.Contains(owners["kubectl-edit/Update"], "f:schemas") {
			t.Errorf("after the forced apply kubectl-edit owns %q, want spec.schemas without spec.replicas", owners["kubectl-edit/Update"])
		}
		if _, ok := owners["kcp/Update"]; !ok {
			t.Errorf("the status manager was lost: %v", managers(forced))
		}
	})

	t.Run("a JSON patch records its writer, as upstream does", func(t *testing.T) {
		patched, err := copies.Patch(ctx, "owned", types.JSONPatchType, []byte(`[{"op":"replace","path":"/spec/replicas","value":11}]`), metav1.PatchOptions{FieldManager: "jsonpatcher"})
		if err != nil {
			t.Fatal(err)
		}
		owners := map[string]string{}
		for _, e := range patched.GetManagedFields() {
			owners[e.Manager+"/"+string(e.Operation)] = string(e.FieldsV1.Raw)
		}
		if !strings.Contains(owners["jsonpatcher/Update"], "f:replicas") || strings.Contains(owners["intruder/Apply"], "f:replicas") {
			t.Errorf("after a JSON patch of spec.replicas the owners are %v, want jsonpatcher owning it", owners)
		}
	})
}
