package cache

import "testing"

func TestParsePath(t *testing.T) {
	tests := []struct {
		name    string
		path    string
		want    ParsedPath
		wantErr bool
	}{
		{name: "unprefixed path is unscoped", path: "/apis/apis.kcp.io/v1alpha1/apiexports", want: ParsedPath{APIPath: "/apis/apis.kcp.io/v1alpha1/apiexports"}},
		{name: "health is unscoped", path: "/readyz", want: ParsedPath{APIPath: "/readyz"}},
		{name: "prefix must end at a segment", path: "/services/cachex/shards/a/clusters/root", want: ParsedPath{APIPath: "/services/cachex/shards/a/clusters/root"}},
		{name: "concrete scope", path: "/services/cache/shards/amber/clusters/root/apis/g/v1/r/x", want: ParsedPath{Scope: Scope{"amber", "root"}, APIPath: "/apis/g/v1/r/x", Scoped: true}},
		{name: "scope root", path: "/services/cache/shards/amber/clusters/root", want: ParsedPath{Scope: Scope{"amber", "root"}, APIPath: "/", Scoped: true}},
		{name: "scope root with slash", path: "/services/cache/shards/amber/clusters/root/", want: ParsedPath{Scope: Scope{"amber", "root"}, APIPath: "/", Scoped: true}},
		{name: "wildcards", path: "/services/cache/shards/*/clusters/*/apis", want: ParsedPath{Scope: Scope{"*", "*"}, APIPath: "/apis", Scoped: true}},
		{name: "shard with colons", path: "/services/cache/shards/system:cache:server/clusters/system:system-crds/apis", want: ParsedPath{Scope: SystemScope, APIPath: "/apis", Scoped: true}},
		{name: "bare service prefix", path: "/services/cache", wantErr: true},
		{name: "missing cluster", path: "/services/cache/shards/amber/apis/g/v1/r", wantErr: true},
		{name: "empty shard", path: "/services/cache/shards//clusters/root/apis", wantErr: true},
		{name: "empty cluster", path: "/services/cache/shards/amber/clusters//apis", wantErr: true},
		{name: "dot-dot shard", path: "/services/cache/shards/../clusters/root/apis", wantErr: true},
		{name: "upper-case shard", path: "/services/cache/shards/Amber/clusters/root/apis", wantErr: true},
		{name: "workspace path as cluster", path: "/services/cache/shards/amber/clusters/root:org/apis", wantErr: true},
		{name: "wrong segment names", path: "/services/cache/shard/amber/cluster/root/apis", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParsePath(tt.path)
			if (err != nil) != tt.wantErr {
				t.Fatalf("ParsePath(%q) error = %v, wantErr %v", tt.path, err, tt.wantErr)
			}
			if !tt.wantErr && got != tt.want {
				t.Fatalf("ParsePath(%q) = %+v, want %+v", tt.path, got, tt.want)
			}
		})
	}
}

func TestScopedPathRoundTrips(t *testing.T) {
	for _, s := range []Scope{{"amber", "root"}, {"*", "root"}, {"amber", "*"}, {"*", "*"}, SystemScope} {
		p := ScopedPath(s, "apis/apis.kcp.io/v1alpha1/apiexports")
		got, err := ParsePath(p)
		if err != nil {
			t.Fatalf("ParsePath(%q): %v", p, err)
		}
		if got.Scope != s || got.APIPath != "/apis/apis.kcp.io/v1alpha1/apiexports" {
			t.Fatalf("round trip of %v through %q gave %+v", s, p, got)
		}
	}
}
