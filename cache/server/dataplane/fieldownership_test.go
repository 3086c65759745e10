package dataplane

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

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
