package integration_test

import (
	"net/http"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

// TestRegionsUserReadPartitionHasAHomeOfItsOwn: a shard's user-read
// partition is claimed, like any partition, by the cache that takes its
// first write, with the shard's own identity; the peer mirrors it from
// there and refuses the shard's writes into it. It is a partition of its
// own in the claims: moving a shard's home (--adopt-shard) moves it only
// when it is named too.
func TestRegionsUserReadPartitionHasAHomeOfItsOwn(t *testing.T) {
	if testing.Short() {
		t.Skip("long scenario (caches in regions): skipped with -short")
	}
	ctx := testContext(t)
	regions := startRegions(t, ctx, "east", "west")
	east, west := regions["east"], regions["west"]
	const shard = "amber"
	partition := kcpcache.UserReadPartition(shard)
	userRead := func(r *region) dynamic.ResourceInterface {
		t.Helper()
		cfg := r.srv.ShardConfig(t, shard)
		cfg.Host += kcpcache.ScopedPathPrefix(kcpcache.Scope{Shard: partition, Cluster: "root"})
		c, err := dynamic.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return c.Resource(apiExports)
	}
	if _, err := userRead(east).Create(ctx, apiExport("org-a", nil), metav1.CreateOptions{}); err != nil {
		t.Fatalf("shard %s writing its user-read partition at east: %v", shard, err)
	}
	waitItems(t, east, partition, 1, "")
	waitItems(t, west, partition, 1, "east")
	_, err := userRead(west).Create(ctx, apiExport("org-b", nil), metav1.CreateOptions{})
	wantStatus(t, "shard "+shard+" writing its user-read partition at west, not its home", err, http.StatusForbidden, "", "")
	for _, r := range []*region{east, west} {
		ans, err := r.homesTable(ctx, t, partition)
		if err != nil {
			t.Fatal(err)
		}
		if len(ans.Claims) != 1 || ans.Claims[0].Shard != partition || ans.Claims[0].Home != "east" {
			t.Fatalf("%s's claims of %s: %+v, want east's", r.name, partition, ans.Claims)
		}
	}
}
