package removal

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// BenchmarkPurgePartition purges 20,000 objects of one shard (two types)
// in batches and reports the time against the same run's baseline: one
// unbounded etcd range delete per type of the same keys.
func BenchmarkPurgePartition(b *testing.B) {
	c := StartEtcd(b)
	types := []string{"apis.kcp.io/apiexports", "apis.kcp.io/apiresourceschemas"}
	const perType = 10000
	var batched, baseline time.Duration
	for range b.N {
		Fill(b, c, "gone", types, perType)
		start := time.Now()
		res, err := purgePartition(context.Background(), c, KeyPrefix, "gone", 0, DefaultBatchSize, nil)
		if err != nil || res.deleted != 2*perType {
			b.Fatalf("purged %d, err %v", res.deleted, err)
		}
		batched += time.Since(start)

		Fill(b, c, "gone", types, perType)
		start = time.Now()
		for _, tp := range types {
			if _, err := c.Delete(context.Background(), KeyPrefix+"/"+tp+"/gone/", clientv3.WithPrefix()); err != nil {
				b.Fatal(err)
			}
		}
		baseline += time.Since(start)
	}
	b.ReportMetric(float64(batched.Milliseconds())/float64(b.N), "purge-ms")
	b.ReportMetric(float64(baseline.Milliseconds())/float64(b.N), "rangedelete-ms")
	b.ReportMetric(float64(batched)/float64(baseline), "ratio")
}
