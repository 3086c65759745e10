package removal_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
	"github.com/kcp-cache/kcp-cache/cache/server/removal"
)

// Purging the root shard's partition deletes the Shard objects it holds;
// those deletions are a purge, not kcp removing the shards, so the shards
// they name keep their partitions. A Shard object deleted on its own still
// purges.
func TestPurgingTheRootShardPurgesNoShardItLists(t *testing.T) {
	c := removal.StartEtcd(t)
	shardObjects := "core.kcp.io/shards"
	// Root lists x and y; "other" lists z (as if it held a Shard copy).
	for _, name := range []string{"x", "y"} {
		if _, err := c.Put(context.Background(), fmt.Sprintf("%s/%s/root/root/%s", removal.KeyPrefix, shardObjects, name), "{}"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Put(context.Background(), fmt.Sprintf("%s/%s/other/root/z", removal.KeyPrefix, shardObjects), "{}"); err != nil {
		t.Fatal(err)
	}
	for _, shard := range []string{"x", "y", "z"} {
		removal.Fill(t, c, shard, []string{"apis.kcp.io/apiexports"}, 5)
	}
	removal.Fill(t, c, "root", []string{"apis.kcp.io/apiexports"}, 5)
	removal.PutHeartbeat(t, c, "root", time.Now().Add(-time.Hour), 10)

	p := removal.NewShardPurger(removal.ShardPurgerConfig{Client: c, Prefix: removal.KeyPrefix, Retention: time.Minute, Interval: 50 * time.Millisecond, BatchSize: 1})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { p.Run(ctx) })
	defer func() { cancel(); wg.Wait() }()

	cachetest.Eventually(t, "root purged", func(context.Context) error {
		if n := removal.Count(t, c, removal.KeyPrefix+"/"+shardObjects+"/root/"); n != 0 {
			return fmt.Errorf("%d Shard objects left in root", n)
		}
		return nil
	})
	// z's deletion comes after root's purge in etcd's order; once z is
	// purged, the purger has decided about x and y.
	if _, err := c.Delete(context.Background(), fmt.Sprintf("%s/%s/other/root/z", removal.KeyPrefix, shardObjects)); err != nil {
		t.Fatal(err)
	}
	cachetest.Eventually(t, "z purged", func(context.Context) error {
		if n := removal.Count(t, c, removal.KeyPrefix+"/apis.kcp.io/apiexports/z/"); n != 0 {
			return fmt.Errorf("%d keys left", n)
		}
		return nil
	})
	for _, shard := range []string{"x", "y"} {
		if n := removal.Count(t, c, removal.KeyPrefix+"/apis.kcp.io/apiexports/"+shard+"/"); n != 5 {
			t.Errorf("shard %s, listed by the purged root, has %d keys, want 5", shard, n)
		}
	}
}
