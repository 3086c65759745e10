package removal

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

func eventually(t *testing.T, what string, f func() error) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		last = f()
		return last == nil, nil
	})
	if err != nil {
		t.Fatalf("%s: %v (last: %v)", what, err, last)
	}
}

// Purging the root shard's partition deletes the Shard objects it holds;
// those deletions are a purge, not kcp removing the shards, so the shards
// they name keep their partitions. A Shard object deleted on its own still
// purges.
func TestPurgingTheRootShardPurgesNoShardItLists(t *testing.T) {
	c := startEtcd(t)
	shardObjects := "core.kcp.io/shards"
	// Root lists x and y; "other" lists z (as if it held a Shard copy).
	for _, name := range []string{"x", "y"} {
		if _, err := c.Put(context.Background(), fmt.Sprintf("%s/%s/root/root/%s", testPrefix, shardObjects, name), "{}"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Put(context.Background(), fmt.Sprintf("%s/%s/other/root/z", testPrefix, shardObjects), "{}"); err != nil {
		t.Fatal(err)
	}
	for _, shard := range []string{"x", "y", "z"} {
		fill(t, c, shard, []string{"apis.kcp.io/apiexports"}, 5)
	}
	fill(t, c, "root", []string{"apis.kcp.io/apiexports"}, 5)
	putHeartbeat(t, c, "root", time.Now().Add(-time.Hour), 10)

	p := NewShardPurger(ShardPurgerConfig{Client: c, Prefix: testPrefix, Retention: time.Minute, Interval: 50 * time.Millisecond, BatchSize: 1})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { p.Run(ctx) })
	defer func() { cancel(); wg.Wait() }()

	eventually(t, "root purged", func() error {
		if n := count(t, c, testPrefix+"/"+shardObjects+"/root/"); n != 0 {
			return fmt.Errorf("%d Shard objects left in root", n)
		}
		return nil
	})
	// z's deletion comes after root's purge in etcd's order; once z is
	// purged, the purger has decided about x and y.
	if _, err := c.Delete(context.Background(), fmt.Sprintf("%s/%s/other/root/z", testPrefix, shardObjects)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "z purged", func() error {
		if n := count(t, c, testPrefix+"/apis.kcp.io/apiexports/z/"); n != 0 {
			return fmt.Errorf("%d keys left", n)
		}
		return nil
	})
	for _, shard := range []string{"x", "y"} {
		if n := count(t, c, testPrefix+"/apis.kcp.io/apiexports/"+shard+"/"); n != 5 {
			t.Errorf("shard %s, listed by the purged root, has %d keys, want 5", shard, n)
		}
	}
}
