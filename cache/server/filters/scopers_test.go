package filters

import (
	"testing"

	"github.com/kcp-cache/kcp-cache/cache"
)

func TestScopers(t *testing.T) {
	tests := []struct {
		name    string
		scoper  PathScoper
		path    string
		want    cache.ParsedPath
		wantErr bool
	}{
		{"cache: scoped", CachePaths, "/services/cache/shards/a/clusters/root/apis", cache.ParsedPath{Scope: cache.Scope{Shard: "a", Cluster: "root"}, APIPath: "/apis", Scoped: true}, false},
		{"cache: system", CachePaths, "/apis/apiextensions.k8s.io/v1", cache.ParsedPath{APIPath: "/apis/apiextensions.k8s.io/v1"}, false},
		{"cache: wildcard", CachePaths, "/services/cache/shards/a/clusters/*/apis", cache.ParsedPath{Scope: cache.Scope{Shard: "a", Cluster: "*"}, APIPath: "/apis", Scoped: true}, false},
		{"cache: system below the prefix", CachePaths, "/services/cache/apis/apiextensions.k8s.io/v1", cache.ParsedPath{APIPath: "/apis/apiextensions.k8s.io/v1"}, false},
		{"cache: health below the prefix", CachePaths, "/services/cache/readyz", cache.ParsedPath{APIPath: "/readyz"}, false},
		{"cache: prefix root", CachePaths, "/services/cache", cache.ParsedPath{APIPath: "/"}, false},
		{"cache: prefix must end at a segment", CachePaths, "/services/cachex/shards", cache.ParsedPath{APIPath: "/services/cachex/shards"}, false},
		{"cache: broken shards path", CachePaths, "/services/cache/shards/a/apis", cache.ParsedPath{}, true},
		{"cache: shards without a name", CachePaths, "/services/cache/shards", cache.ParsedPath{}, true},
		{"clusters: scoped", ClusterPaths("amber"), "/clusters/root/apis/g/v1/r", cache.ParsedPath{Scope: cache.Scope{Shard: "amber", Cluster: "root"}, APIPath: "/apis/g/v1/r", Scoped: true}, false},
		{"clusters: wildcard", ClusterPaths("amber"), "/clusters/*/apis", cache.ParsedPath{Scope: cache.Scope{Shard: "amber", Cluster: "*"}, APIPath: "/apis", Scoped: true}, false},
		{"clusters: root only", ClusterPaths("amber"), "/clusters/root", cache.ParsedPath{Scope: cache.Scope{Shard: "amber", Cluster: "root"}, APIPath: "/", Scoped: true}, false},
		{"clusters: workspace path", ClusterPaths("amber"), "/clusters/root:org/apis", cache.ParsedPath{}, true},
		{"clusters: system", ClusterPaths("amber"), "/readyz", cache.ParsedPath{APIPath: "/readyz"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.scoper(tt.path)
			if (err != nil) != tt.wantErr {
				t.Fatalf("error = %v, wantErr %v", err, tt.wantErr)
			}
			if !tt.wantErr && got != tt.want {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}
