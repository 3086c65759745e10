package integration_test

import (
	"context"
	"net/http"
	"reflect"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
)

// A host (here: a server holding shard "amber"'s own objects under
// /clusters/{cluster}) serves a cache under /services/cache/ on its own
// port, both stored in one etcd under separate prefixes.
func TestCacheMountedInAHostServesBothOnOnePort(t *testing.T) {
	t.Parallel()
	srv := cachetest.StartServer(t, cachetest.Mounted("amber"))
	ctx := testContext(t)
	hostAdmin := srv.HostConfig()
	if err := cachetest.WaitForPath(ctx, hostAdmin, "/services/cache/readyz"); err != nil {
		t.Fatal(err)
	}
	if got, want := srv.Config().Host, hostAdmin.Host; got != want {
		t.Errorf("the cache is reached at %s, the host at %s: want one port", got, want)
	}

	local := cachetest.Dynamic(t, hostAdmin, "/clusters/root")
	copies := dyn(t, srv, "amber", "root")
	cachetest.Eventually(t, "a copy created", func(ctx context.Context) error {
		_, err := copies.Resource(apiExports).Create(ctx, apiExport("copy", nil), metav1.CreateOptions{})
		return err
	})
	if _, err := local.Resource(apiExports).Create(ctx, apiExport("local", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		client dynamic.Interface
		want   []string
	}{{local, []string{"amber/root/local"}}, {copies, []string{"amber/root/copy"}}} {
		list, err := c.client.Resource(apiExports).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := partitionsOf(list.Items); !reflect.DeepEqual(got, c.want) {
			t.Errorf("list = %v, want %v", got, c.want)
		}
	}

	// The host's own credentials work for the mounted cache too.
	viaHostToken := cachetest.Dynamic(t, hostAdmin, "/services/cache/shards/*/clusters/*")
	list, err := viaHostToken.Resource(apiExports).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("listing the cache with the host's token: %v", err)
	}
	if got, want := partitionsOf(list.Items), []string{"amber/root/copy"}; !reflect.DeepEqual(got, want) {
		t.Errorf("listing the cache with the host's token = %v, want %v", got, want)
	}
	for _, p := range kcpcache.HealthPaths {
		if err := cachetest.WaitForPath(ctx, hostAdmin, p); err != nil {
			t.Error(err)
		}
	}

	// Shard blue, authenticated by the host's client CA, gets the cache's
	// rules: its own partition only, every partition to read.
	blue := srv.ShardConfig(t, "blue")
	if code, status := call(t, blue, "POST", kcpcache.ScopedPath(kcpcache.Scope{Shard: "blue", Cluster: "org"}, exportsPath), exportBody("by-blue")); code != http.StatusCreated {
		t.Errorf("blue writing its partition through the host: %d %s", code, status.Message)
	}
	for _, path := range []string{kcpcache.ScopedPath(kcpcache.Scope{Shard: "amber", Cluster: "root"}, exportsPath), kcpcache.ServicePrefix + exportsPath} {
		if code, status := call(t, blue, "POST", path, exportBody("x")); code != http.StatusForbidden {
			t.Errorf("blue writing %s through the host: %d %s, want 403", path, code, status.Message)
		}
	}
	if code, status := call(t, blue, "GET", kcpcache.ScopedPath(kcpcache.Scope{Shard: "*", Cluster: "*"}, exportsPath), ""); code != http.StatusOK {
		t.Errorf("blue listing */*: %d %s", code, status.Message)
	}

	// The host's own replication gets amber's identity from the cache, not
	// the admin's: it may write amber's partition only.
	hostShard := srv.Server().HostShardConfig()
	if hostShard == nil || hostShard.BearerToken == srv.Config().BearerToken {
		t.Fatalf("no identity of its own for the host shard: %v", hostShard)
	}
	if code, status := call(t, hostShard, "POST", kcpcache.ScopedPath(kcpcache.Scope{Shard: "amber", Cluster: "root"}, exportsPath), exportBody("by-host")); code != http.StatusCreated {
		t.Errorf("the host shard writing its partition: %d %s", code, status.Message)
	}
	if code, status := call(t, hostShard, "POST", kcpcache.ScopedPath(kcpcache.Scope{Shard: "blue", Cluster: "root"}, exportsPath), exportBody("x")); code != http.StatusForbidden {
		t.Errorf("the host shard writing blue's partition: %d %s, want 403", code, status.Message)
	}
}
