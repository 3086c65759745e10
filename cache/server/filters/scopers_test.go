package filters

import (
	"testing"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

func TestScopers(t *testing.T) {
	tests := []struct {
		name    string
		scoper  PathScoper
		path    string
		want    kcpcache.ParsedPath
		wantErr bool
	}{
		{"cache: scoped", CachePaths, "/services/cache/shards/a/clusters/root/apis", kcpcache.ParsedPath{Scope: kcpcache.Scope{Shard: "a", Cluster: "root"}, APIPath: "/apis", Scoped: true}, false},
		{"cache: system", CachePaths, "/apis/apiextensions.k8s.io/v1", kcpcache.ParsedPath{APIPath: "/apis/apiextensions.k8s.io/v1"}, false},
		{"cache: wildcard", CachePaths, "/services/cache/shards/a/clusters/*/apis", kcpcache.ParsedPath{Scope: kcpcache.Scope{Shard: "a", Cluster: "*"}, APIPath: "/apis", Scoped: true}, false},
		{"cache: system below the prefix", CachePaths, "/services/cache/apis/apiextensions.k8s.io/v1", kcpcache.ParsedPath{APIPath: "/apis/apiextensions.k8s.io/v1"}, false},
		{"cache: health below the prefix", CachePaths, "/services/cache/readyz", kcpcache.ParsedPath{APIPath: "/readyz"}, false},
		{"cache: prefix root", CachePaths, "/services/cache", kcpcache.ParsedPath{APIPath: "/"}, false},
		{"cache: prefix must end at a segment", CachePaths, "/services/cachex/shards", kcpcache.ParsedPath{APIPath: "/services/cachex/shards"}, false},
		{"cache: broken shards path", CachePaths, "/services/cache/shards/a/apis", kcpcache.ParsedPath{}, true},
		{"cache: shards without a name", CachePaths, "/services/cache/shards", kcpcache.ParsedPath{}, true},
		{"clusters: scoped", ClusterPaths("amber"), "/clusters/root/apis/g/v1/r", kcpcache.ParsedPath{Scope: kcpcache.Scope{Shard: "amber", Cluster: "root"}, APIPath: "/apis/g/v1/r", Scoped: true}, false},
		{"clusters: wildcard", ClusterPaths("amber"), "/clusters/*/apis", kcpcache.ParsedPath{Scope: kcpcache.Scope{Shard: "amber", Cluster: "*"}, APIPath: "/apis", Scoped: true}, false},
		{"clusters: root only", ClusterPaths("amber"), "/clusters/root", kcpcache.ParsedPath{Scope: kcpcache.Scope{Shard: "amber", Cluster: "root"}, APIPath: "/", Scoped: true}, false},
		{"clusters: workspace path", ClusterPaths("amber"), "/clusters/root:org/apis", kcpcache.ParsedPath{}, true},
		{"clusters: system", ClusterPaths("amber"), "/readyz", kcpcache.ParsedPath{APIPath: "/readyz"}, false},
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
