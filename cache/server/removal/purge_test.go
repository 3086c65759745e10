package removal

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A purge deletes every type of one shard's partition, in batches of the
// given size, and nothing of a shard whose name extends it.
func TestPurgePartitionDeletesEveryTypeInBatches(t *testing.T) {
	c := StartEtcd(t)
	types := []string{"apis.kcp.io/apiexports", "apis.kcp.io/apiresourceschemas", "example.dev/widgets"}
	Fill(t, c, "gone", types, 1200)
	Fill(t, c, "gone-not", types, 10)
	rev := PutHeartbeat(t, c, "gone", time.Now().Add(-time.Hour), 10)
	PutHeartbeat(t, c, "gone-not", time.Now(), 10)

	res, err := purgePartition(context.Background(), c, KeyPrefix, "gone", rev, 500, nil)
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
		if n := Count(t, c, KeyPrefix+"/"+tp+"/gone/"); n != 0 {
			t.Errorf("%s: %d keys of the purged shard left", tp, n)
		}
	}
	if n := Count(t, c, KeyPrefix+"/"); n != 3*10+1 {
		t.Errorf("%d keys left in total, want the other shard's 31", n)
	}
}

// A shard that renews its heartbeat during a purge stops it: the batch
// after the renewal is not deleted.
func TestPurgeStopsWhenTheShardComesBack(t *testing.T) {
	c := StartEtcd(t)
	Fill(t, c, "back", []string{"apis.kcp.io/apiexports"}, 1000)
	rev := PutHeartbeat(t, c, "back", time.Now().Add(-time.Hour), 10)
	renewed := false
	res, err := purgePartition(context.Background(), c, KeyPrefix, "back", rev, 100, func(string, int64) {
		if !renewed {
			PutHeartbeat(t, c, "back", time.Now(), 10)
			renewed = true
		}
	})
	if err != errShardCameBack {
		t.Fatalf("purge returned %v, want errShardCameBack", err)
	}
	if res.deleted != 100 {
		t.Errorf("deleted %d keys, want only the first batch of 100", res.deleted)
	}
	if n := Count(t, c, KeyPrefix+"/apis.kcp.io/apiexports/back/"); n != 900 {
		t.Errorf("%d keys left, want 900", n)
	}
	if n := Count(t, c, heartbeatKey(KeyPrefix, "back")); n != 1 {
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
