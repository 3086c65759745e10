package filters

import (
	"testing"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

func TestCachePathsNameThePartition(t *testing.T) {
	tests := []struct {
		name    string
		path    string
		want    kcpcache.ParsedPath
		wantErr bool
	}{
		{"scoped", "/services/cache/shards/a/clusters/root/apis", kcpcache.ParsedPath{Scope: kcpcache.Scope{Shard: "a", Cluster: "root"}, APIPath: "/apis", Scoped: true}, false},
		{"system", "/apis/apiextensions.k8s.io/v1", kcpcache.ParsedPath{APIPath: "/apis/apiextensions.k8s.io/v1"}, false},
		{"wildcard", "/services/cache/shards/a/clusters/*/apis", kcpcache.ParsedPath{Scope: kcpcache.Scope{Shard: "a", Cluster: "*"}, APIPath: "/apis", Scoped: true}, false},
		{"system below the prefix", "/services/cache/apis/apiextensions.k8s.io/v1", kcpcache.ParsedPath{APIPath: "/apis/apiextensions.k8s.io/v1"}, false},
		{"health below the prefix", "/services/cache/readyz", kcpcache.ParsedPath{APIPath: "/readyz"}, false},
		{"prefix root", "/services/cache", kcpcache.ParsedPath{APIPath: "/"}, false},
		{"prefix must end at a segment", "/services/cachex/shards", kcpcache.ParsedPath{APIPath: "/services/cachex/shards"}, false},
		{"broken shards path", "/services/cache/shards/a/apis", kcpcache.ParsedPath{}, true},
		{"shards without a name", "/services/cache/shards", kcpcache.ParsedPath{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := CachePaths(tt.path)
			if (err != nil) != tt.wantErr {
				t.Fatalf("error = %v, wantErr %v", err, tt.wantErr)
			}
			if !tt.wantErr && got != tt.want {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}
