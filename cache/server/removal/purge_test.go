package removal

import (
	"context"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kcp-cache/kcp-cache/cache/server/embeddedetcd"
)

const testPrefix = "/cache"

func startEtcd(t *testing.T) *clientv3.Client { return startEtcdB(t) }

func startEtcdB(t testing.TB) *clientv3.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, err := embeddedetcd.Start(ctx, embeddedetcd.Config{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.ClientURL()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// fill writes n keys of each type into shard's partition, over two clusters,
// in transactions of 100.
func fill(t *testing.T, c *clientv3.Client, shard string, types []string, n int) {
	fillB(t, c, shard, types, n)
}

func fillB(t testing.TB, c *clientv3.Client, shard string, types []string, n int) {
	t.Helper()
	for _, tp := range types {
		for i := 0; i < n; i += 100 {
			var ops []clientv3.Op
			for j := i; j < min(i+100, n); j++ {
				ops = append(ops, clientv3.OpPut(fmt.Sprintf("%s/%s/%s/c%d/obj-%05d", testPrefix, tp, shard, j%2, j), "{}"))
			}
			if _, err := c.Txn(context.Background()).Then(ops...).Commit(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func count(t *testing.T, c *clientv3.Client, prefix string) int64 {
	t.Helper()
	resp, err := c.Get(context.Background(), prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return resp.Count
}

func putHeartbeat(t *testing.T, c *clientv3.Client, shard string, renew time.Time, lease int) int64 {
	t.Helper()
	value := fmt.Sprintf(`{"apiVersion":"cache.kcp.io/v1alpha1","kind":"ShardHeartbeat","metadata":{"name":%q},"spec":{"renewTime":%q,"leaseDurationSeconds":%d}}`,
		shard, metav1.NewMicroTime(renew).Format(metav1.RFC3339Micro), lease)
	resp, err := c.Put(context.Background(), heartbeatKey(testPrefix, shard), value)
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}

// A purge deletes every type of one shard's partition, in batches of the
// given size, and nothing of a shard whose name extends it.
func TestPurgePartitionDeletesEveryTypeInBatches(t *testing.T) {
	c := startEtcd(t)
	types := []string{"apis.kcp.io/apiexports", "apis.kcp.io/apiresourceschemas", "example.dev/widgets"}
	fill(t, c, "gone", types, 1200)
	fill(t, c, "gone-not", types, 10)
	rev := putHeartbeat(t, c, "gone", time.Now().Add(-time.Hour), 10)
	putHeartbeat(t, c, "gone-not", time.Now(), 10)

	res, err := purgePartition(context.Background(), c, testPrefix, "gone", rev, 500, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("purged %d keys of %d types in %d batches in %s", res.deleted, res.types, res.batches, res.duration)
	if want := int64(3*1200 + 1); res.deleted != want {
		t.Errorf("deleted %d keys, want %d", res.deleted, want)
	}
	if res.batches != 3*3+1 {
		t.Errorf("%d batches, want 10 (3 per type of 1,200 keys, 1 for the heartbeat)", res.batches)
	}
	for _, tp := range append(types, "cache.kcp.io/shardheartbeats") {
		if n := count(t, c, testPrefix+"/"+tp+"/gone/"); n != 0 {
			t.Errorf("%s: %d keys of the purged shard left", tp, n)
		}
	}
	if n := count(t, c, testPrefix+"/"); n != 3*10+1 {
		t.Errorf("%d keys left in total, want the other shard's 31", n)
	}
}

// A shard that renews its heartbeat during a purge stops it: the batch
// after the renewal is not deleted.
func TestPurgeStopsWhenTheShardComesBack(t *testing.T) {
	c := startEtcd(t)
	fill(t, c, "back", []string{"apis.kcp.io/apiexports"}, 1000)
	rev := putHeartbeat(t, c, "back", time.Now().Add(-time.Hour), 10)
	renewed := false
	res, err := purgePartition(context.Background(), c, testPrefix, "back", rev, 100, func(string, int64) {
		if !renewed {
			putHeartbeat(t, c, "back", time.Now(), 10)
			renewed = true
		}
	})
	if err != errShardCameBack {
		t.Fatalf("purge returned %v, want errShardCameBack", err)
	}
	if res.deleted != 100 {
		t.Errorf("deleted %d keys, want only the first batch of 100", res.deleted)
	}
	if n := count(t, c, testPrefix+"/apis.kcp.io/apiexports/back/"); n != 900 {
		t.Errorf("%d keys left, want 900", n)
	}
	if n := count(t, c, heartbeatKey(testPrefix, "back")); n != 1 {
		t.Error("the renewed heartbeat was deleted")
	}
}

func TestHeartbeatExpiry(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	value := func(renew time.Time, lease int) []byte {
		return fmt.Appendf(nil, `{"spec":{"renewTime":%q,"leaseDurationSeconds":%d}}`, metav1.NewMicroTime(renew).Format(metav1.RFC3339Micro), lease)
	}
	for _, tc := range []struct {
		name            string
		hb              heartbeat
		fresh, expiredR bool
	}{
		{"renewed now", decodeHeartbeat(value(now, 10), 5), true, false},
		{"within its lease", decodeHeartbeat(value(now.Add(-9*time.Second), 10), 5), true, false},
		{"expired within the retention", decodeHeartbeat(value(now.Add(-time.Hour), 10), 5), false, false},
		{"expired beyond the retention", decodeHeartbeat(value(now.Add(-3*time.Hour), 10), 5), false, true},
		{"unreadable", decodeHeartbeat([]byte("not json"), 5), true, false},
		{"absent", heartbeat{}, false, false},
	} {
		if got := tc.hb.fresh(now); got != tc.fresh {
			t.Errorf("%s: fresh = %v, want %v", tc.name, got, tc.fresh)
		}
		if got := tc.hb.expiredLongerThan(now, 2*time.Hour); got != tc.expiredR {
			t.Errorf("%s: expired beyond 2h = %v, want %v", tc.name, got, tc.expiredR)
		}
	}
}
