package standin_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	apiextensionsapiserver "k8s.io/apiextensions-apiserver/pkg/apiserver"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/server/filters"
	"github.com/kcp-cache/kcp-cache/cache/server/standin"
)

// The stand-in's /clusters/{cluster}/ paths reach the partition of that
// cluster in its shard, with the API path upstream's handlers see; anything
// else keeps the cache's own grammar.
func TestClusterPathsAddressTheShardsPartitions(t *testing.T) {
	tests := []struct {
		name      string
		path      string
		wantScope kcpcache.Scope
		wantPath  string
		wantCode  int
	}{
		{"a cluster", "/clusters/root/apis/g/v1/r", kcpcache.Scope{Shard: "amber", Cluster: "root"}, "/apis/g/v1/r", http.StatusOK},
		{"every cluster", "/clusters/*/apis", kcpcache.Scope{Shard: "amber", Cluster: "*"}, "/apis", http.StatusOK},
		{"the cluster's root", "/clusters/root", kcpcache.Scope{Shard: "amber", Cluster: "root"}, "/", http.StatusOK},
		{"a workspace path is no cluster name", "/clusters/root:org/apis", kcpcache.Scope{}, "", http.StatusBadRequest},
		{"health", "/readyz", kcpcache.SystemScope, "/readyz", http.StatusOK},
		{"the cache's own paths", "/services/cache/shards/coral/clusters/root/apis", kcpcache.Scope{Shard: "coral", Cluster: "root"}, "/apis", http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var gotScope kcpcache.Scope
			var gotPath string
			seen := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
				gotScope, _ = kcpcache.ScopeFrom(req.Context())
				gotPath = req.URL.Path
			})
			h := standin.Handler(filters.WithPartition(seen, apiextensionsapiserver.Codecs), "amber", nil)
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, tt.path, nil))
			if rec.Code != tt.wantCode {
				t.Fatalf("status %d, want %d: %s", rec.Code, tt.wantCode, rec.Body)
			}
			if tt.wantCode == http.StatusOK && (gotScope != tt.wantScope || gotPath != tt.wantPath) {
				t.Errorf("served in %v as %q, want %v as %q", gotScope, gotPath, tt.wantScope, tt.wantPath)
			}
		})
	}
}
