package cache

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

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

func TestCutPathPrefix(t *testing.T) {
	for _, tt := range []struct {
		path, prefix, rest string
		ok                 bool
	}{
		{"/services/cache", "/services/cache", "", true},
		{"/services/cache/x", "/services/cache", "/x", true},
		{"/services/cachex", "/services/cache", "/services/cachex", false},
		{"/other", "/services/cache", "/other", false},
	} {
		rest, ok := CutPathPrefix(tt.path, tt.prefix)
		if rest != tt.rest || ok != tt.ok {
			t.Errorf("CutPathPrefix(%q, %q) = %q, %v; want %q, %v", tt.path, tt.prefix, rest, ok, tt.rest, tt.ok)
		}
	}
}

func TestIsHealthPath(t *testing.T) {
	for p, want := range map[string]bool{
		"/readyz": true, "/readyz/etcd": true, "/livez": true, "/healthz/ping": true,
		"/readyzz": false, "/version": false, "/metrics": false, "/apis": false,
	} {
		if got := IsHealthPath(p); got != want {
			t.Errorf("IsHealthPath(%q) = %v, want %v", p, got, want)
		}
	}
}

func TestWithPathLeavesTheRequestAlone(t *testing.T) {
	req := httptest.NewRequest("GET", "/services/cache/shards/a/clusters/b/apis?x=1", nil)
	got := WithPath(req, "/apis")
	if req.URL.Path != "/services/cache/shards/a/clusters/b/apis" {
		t.Errorf("the original request was changed to %q", req.URL.Path)
	}
	if got.URL.Path != "/apis" || got.RequestURI != "/apis?x=1" {
		t.Errorf("path %q, request URI %q; want /apis, /apis?x=1", got.URL.Path, got.RequestURI)
	}
	client, _ := http.NewRequest("GET", "https://cache.example/apis", nil)
	if r := WithPath(client, "/services/cache/apis"); r.RequestURI != "" {
		t.Errorf("a client request got RequestURI %q, which http.Client refuses", r.RequestURI)
	}
}

func TestJoinHostPathPutsOneSlashBetween(t *testing.T) {
	for _, c := range []struct{ host, path, want string }{
		{"https://cache.example:6443", "/services/cache", "https://cache.example:6443/services/cache"},
		{"https://cache.example:6443/", "/services/cache", "https://cache.example:6443/services/cache"},
		{"https://proxy.example/prefix/", "readyz", "https://proxy.example/prefix/readyz"},
		{"127.0.0.1:6443", "/readyz", "127.0.0.1:6443/readyz"},
		{"https://cache.example", "", "https://cache.example"},
	} {
		if got := JoinHostPath(c.host, c.path); got != c.want {
			t.Errorf("JoinHostPath(%q, %q) = %q, want %q", c.host, c.path, got, c.want)
		}
	}
}
