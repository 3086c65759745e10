package cache

import (
	"strings"
	"testing"
)

// FuzzParsePath: whatever path a client sends, a scoped answer names a
// valid partition whose names can never become a bad storage key segment,
// and the path rebuilt from it parses back to the same answer.
func FuzzParsePath(f *testing.F) {
	for _, p := range []string{
		"/services/cache/shards/alpha/clusters/root/apis/apis.kcp.io/v1alpha2/apiexports",
		"/services/cache/shards/*/clusters/*/apis/apis.kcp.io/v1alpha2/apiexports/x",
		"/services/cache/shards/system:cache:server/clusters/root:org/api/v1",
		"/services/cache/shards/a/clusters/b",
		"/services/cache/shards/a/clusters/",
		"/services/cache/shards/../clusters/root/apis",
		"/services/cache/shards/a%2Fb/clusters/root",
		"/services/cachex/shards/a/clusters/b",
		"/services/cache",
		"/healthz",
		"",
	} {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, path string) {
		got, err := ParsePath(path)
		if err != nil {
			return
		}
		if !got.Scoped {
			if got.APIPath != path {
				t.Fatalf("an unscoped path changed: %q -> %q", path, got.APIPath)
			}
			return
		}
		if !strings.HasPrefix(got.APIPath, "/") {
			t.Fatalf("API path %q of %q does not start with /", got.APIPath, path)
		}
		for _, seg := range []string{got.Scope.Shard, got.Scope.Cluster} {
			if seg == "" || seg == "." || seg == ".." || strings.ContainsAny(seg, "/%\x00") {
				t.Fatalf("%q parsed into the key segment %q", path, seg)
			}
		}
		if err := got.Scope.Validate(); err != nil {
			t.Fatalf("%q parsed into an invalid scope %+v: %v", path, got.Scope, err)
		}
		again, err := ParsePath(ScopedPath(got.Scope, got.APIPath))
		if err != nil || again != got {
			t.Fatalf("%q -> %+v; rebuilt %q -> %+v, %v", path, got, ScopedPath(got.Scope, got.APIPath), again, err)
		}
	})
}
