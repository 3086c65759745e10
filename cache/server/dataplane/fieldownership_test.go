package dataplane

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apiserver/pkg/endpoints/handlers"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/server/partition"
)

// TestOnlyCopiesSkipTheFieldManager checks which writes get the field
// manager that records nothing: writes of an origin's body into a shard's
// partition, whose managedFields storage replaces. Apply and JSON patches
// (no origin body) and the system partition keep the real one.
func TestOnlyCopiesSkipTheFieldManager(t *testing.T) {
	r := Resource{Group: "example.dev", Resource: "widgets", Singular: "widget", Kind: "Widget", ListKind: "WidgetList", Versions: []string{"v1"}}
	scopes, err := newRequestScopes(r, newTyping(r), nil, scopeConfig{})
	if err != nil {
		t.Fatal(err)
	}
	real := scopes["v1"]
	shard := kcpcache.Scope{Shard: "alpha", Cluster: "root"}
	for _, tt := range []struct {
		name      string
		ctx       func(context.Context) context.Context
		wantCheap bool
	}{
		{"copy into a shard's partition", func(ctx context.Context) context.Context {
			return partition.WithOriginMeta(kcpcache.WithScope(ctx, shard), partition.OriginMeta{})
		}, true},
		{"apply or JSON patch: no origin body", func(ctx context.Context) context.Context {
			return kcpcache.WithScope(ctx, shard)
		}, false},
		{"system partition", func(ctx context.Context) context.Context {
			return partition.WithOriginMeta(kcpcache.WithScope(ctx, kcpcache.SystemScope), partition.OriginMeta{})
		}, false},
	} {
		var c copyScopes
		var got *handlers.RequestScope
		h := c.withoutDiscardedFieldManager(real, func(s *handlers.RequestScope) http.Handler {
			return http.HandlerFunc(func(http.ResponseWriter, *http.Request) { got = s })
		})
		req := httptest.NewRequest(http.MethodPost, "/", nil)
		h.ServeHTTP(httptest.NewRecorder(), req.WithContext(tt.ctx(req.Context())))
		if cheap := got != real; cheap != tt.wantCheap {
			t.Errorf("%s: served with the field manager that records nothing: %v, want %v", tt.name, cheap, tt.wantCheap)
		}
		if got.FieldManager == nil {
			t.Errorf("%s: no field manager; upstream's handlers need one", tt.name)
		}
	}
}

// TestCopiesOfOtherVersionsManagersUpdateWithoutError: a copy's body
// carries its origin's managedFields, which may name managers of another
// version of the type (kcp applies APIExports as v1alpha1 and replicates
// them as v1alpha2; a heartbeat mirrored from a peer carries its apply
// record). Upstream's field manager converts the object to each manager's
// version to compare; the field manager of copies cannot convert, and must
// say so as a missing version (the manager is skipped: storage replaces
// the record with the origin's anyway), not as an error, which upstream
// logs as "[SHOULD NOT HAPPEN] failed to update managedFields" on every
// such write.
func TestCopiesOfOtherVersionsManagersUpdateWithoutError(t *testing.T) {
	r := Resource{Group: "example.dev", Resource: "widgets", Singular: "widget", Kind: "Widget", ListKind: "WidgetList", Versions: []string{"v1alpha1", "v1alpha2"}}
	scopes, err := newRequestScopes(r, newTyping(r), nil, scopeConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var c copyScopes
	cheap, err := c.get(scopes["v1alpha2"])
	if err != nil {
		t.Fatal(err)
	}
	object := func(spec string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]interface{}{
			"apiVersion": "example.dev/v1alpha2", "kind": "Widget",
			"metadata": map[string]interface{}{"name": "w"},
			"spec":     map[string]interface{}{"x": spec},
		}}
		u.SetManagedFields([]metav1.ManagedFieldsEntry{{
			Manager: "origin", Operation: metav1.ManagedFieldsOperationApply, APIVersion: "example.dev/v1alpha1",
			FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:spec":{"f:x":{}}}`)},
		}})
		return u
	}
	if _, err := cheap.FieldManager.Update(object("old"), object("new"), "kcp"); err != nil {
		t.Fatalf("updating a copy whose origin's managers use another version: %v", err)
	}
}
