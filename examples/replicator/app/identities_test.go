package app

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Requests across the shard's clusters name an identity-served type by its
// identity; everything else goes out unchanged.
func TestInjectIdentities(t *testing.T) {
	workspaces := schema.GroupVersionResource{Group: "tenancy.kcp.io", Version: "v1alpha1", Resource: "workspaces"}
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got = append(got, r.URL.Path) }))
	defer srv.Close()
	rt := injectIdentities(map[schema.GroupVersionResource]string{workspaces: "abc"})(http.DefaultTransport)
	for _, p := range []string{
		"/clusters/*/apis/tenancy.kcp.io/v1alpha1/workspaces",
		"/clusters/root/apis/tenancy.kcp.io/v1alpha1/workspaces",
		"/clusters/*/apis/rbac.authorization.k8s.io/v1/clusterroles",
	} {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+p+"?watch=true", nil)
		resp, err := rt.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
	}
	want := []string{
		"/clusters/*/apis/tenancy.kcp.io/v1alpha1/workspaces:abc",
		"/clusters/root/apis/tenancy.kcp.io/v1alpha1/workspaces",
		"/clusters/*/apis/rbac.authorization.k8s.io/v1/clusterroles",
	}
	if len(got) != len(want) {
		t.Fatalf("paths %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("request %d went to %s, want %s", i, got[i], want[i])
		}
	}
	if e, ok := exportOf(workspaces.GroupResource()); !ok || e != "tenancy.kcp.io" {
		t.Errorf("export of workspaces: %q, %v", e, ok)
	}
	if _, ok := exportOf(schema.GroupResource{Group: "rbac.authorization.k8s.io", Resource: "roles"}); ok {
		t.Error("roles have no export")
	}
}
