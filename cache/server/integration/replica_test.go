package integration_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
)

// A pushed copy as kcp's replication controller sends it: the shard
// annotation in the body and the origin's uid, creationTimestamp and
// generation in metadata.
func pushedCopy(name string) *unstructured.Unstructured {
	u := apiExport(name, map[string]interface{}{"v": "1"})
	u.SetUID("origin-uid-" + types.UID(name))
	u.SetCreationTimestamp(metav1.NewTime(time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)))
	u.SetGeneration(7)
	u.SetAnnotations(map[string]string{kcpcache.AnnotationShard: "amber"})
	return u
}

func TestReplicaSemantics(t *testing.T) {
	t.Parallel()
	srv := cachetest.StartServer(t)
	ctx := testContext(t)
	copies := dyn(t, srv, "amber", "root").Resource(apiExports)

	t.Run("a copy keeps the origin's identity", func(t *testing.T) {
		got, err := copies.Create(ctx, pushedCopy("kept"), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.GetUID() != "origin-uid-kept" || !got.GetCreationTimestamp().Time.Equal(time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)) || got.GetGeneration() != 7 {
			t.Fatalf("copy lost origin metadata: uid=%q created=%v generation=%d", got.GetUID(), got.GetCreationTimestamp(), got.GetGeneration())
		}
		if got.GetAnnotations()[kcpcache.AnnotationCluster] != "root" {
			t.Errorf("cluster annotation not filled from the path: %v", got.GetAnnotations())
		}
		// A copy keeps the managedFields it is sent, and records no writer.
		if mf := got.GetManagedFields(); len(mf) != 0 {
			t.Errorf("a copy sent without managedFields carries %v", mf)
		}
	})

	// Upstream decodes a body without a Content-Type as JSON; the checks
	// and the origin metadata apply to it as to any JSON body. Such a
	// copy got a fresh uid and creation time, and the mirror's writer
	// sent its copies that way until it set the header.
	t.Run("a copy sent without a Content-Type keeps the origin's identity", func(t *testing.T) {
		body, err := pushedCopy("no-content-type").MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		client, err := rest.HTTPClientFor(srv.Config())
		if err != nil {
			t.Fatal(err)
		}
		url := srv.Config().Host + kcpcache.ScopedPath(kcpcache.Scope{Shard: "amber", Cluster: "root"}, "/apis/apis.kcp.io/v1alpha1/apiexports")
		req, err := newRequest(ctx, http.MethodPost, url, body)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+srv.Config().BearerToken)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("create without a Content-Type: %s", resp.Status)
		}
		got, err := copies.Get(ctx, "no-content-type", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.GetUID() != "origin-uid-no-content-type" || !got.GetCreationTimestamp().Time.Equal(time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)) || got.GetGeneration() != 7 {
			t.Errorf("copy lost origin metadata: uid=%q created=%v generation=%d", got.GetUID(), got.GetCreationTimestamp(), got.GetGeneration())
		}
	})

	t.Run("a spec change on the copy does not bump generation", func(t *testing.T) {
		got, err := copies.Get(ctx, "kept", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got.Object["spec"] = map[string]interface{}{"v": "2"}
		got.SetGeneration(0) // not sent: the stored generation stays
		updated, err := copies.Update(ctx, got, metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if updated.GetGeneration() != 7 {
			t.Errorf("generation after a spec update without one = %d, want 7", updated.GetGeneration())
		}
		patched, err := copies.Patch(ctx, "kept", types.MergePatchType, []byte(`{"spec":{"v":"3"}}`), metav1.PatchOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if patched.GetGeneration() != 7 {
			t.Errorf("generation after a merge patch = %d, want 7", patched.GetGeneration())
		}
		if mf := patched.GetManagedFields(); len(mf) != 0 {
			t.Errorf("a merge patch recorded its writer on a copy without managedFields: %v", mf)
		}
	})

	t.Run("the origin's new generation is taken", func(t *testing.T) {
		got, err := copies.Get(ctx, "kept", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got.Object["spec"] = map[string]interface{}{"v": "4"}
		got.SetGeneration(8)
		updated, err := copies.Update(ctx, got, metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if updated.GetGeneration() != 8 || updated.GetUID() != "origin-uid-kept" {
			t.Errorf("after pushing generation 8: generation=%d uid=%q", updated.GetGeneration(), updated.GetUID())
		}
	})

	t.Run("deleting a copy ignores its finalizers", func(t *testing.T) {
		u := pushedCopy("finalized")
		u.SetFinalizers([]string{"apis.kcp.io/origin-cleanup"})
		if _, err := copies.Create(ctx, u, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := copies.Delete(ctx, "finalized", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := copies.Get(ctx, "finalized", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("a deleted copy with finalizers is still there (err=%v)", err)
		}
		if keys := srv.EtcdKeys(t, "/apis.kcp.io/apiexports/amber/root/finalized"); len(keys) != 0 {
			t.Errorf("etcd still holds %v", keys)
		}
	})

	t.Run("an object without origin metadata gets fresh metadata", func(t *testing.T) {
		got, err := copies.Create(context.Background(), apiExport("fresh", nil), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.GetUID() == "" || got.GetGeneration() != 1 || got.GetCreationTimestamp().Time.IsZero() {
			t.Errorf("fresh object metadata: uid=%q generation=%d created=%v", got.GetUID(), got.GetGeneration(), got.GetCreationTimestamp())
		}
	})

	t.Run("any fields round-trip", func(t *testing.T) {
		u := apiExport("schemaless", map[string]interface{}{"nested": map[string]interface{}{"list": []interface{}{"a", int64(1), true}}})
		u.Object["status"] = map[string]interface{}{"phase": "Ready"}
		u.Object["extra"] = "top-level field"
		got, err := copies.Create(ctx, u, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if v, _, _ := unstructured.NestedSlice(got.Object, "spec", "nested", "list"); len(v) != 3 {
			t.Errorf("nested list not preserved: %v", got.Object["spec"])
		}
		if v, _, _ := unstructured.NestedString(got.Object, "status", "phase"); v != "Ready" {
			t.Errorf("status not stored with the object: %v", got.Object["status"])
		}
		if got.Object["extra"] != "top-level field" {
			t.Errorf("unknown top-level field pruned: %v", got.Object)
		}
	})
}
