package removal

import (
	"context"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kcp-cache/kcp-cache/cache/server/embeddedetcd"
	"github.com/kcp-cache/kcp-cache/cache/server/embeddedetcd/etcdtest"
)

// The tests' etcd: exported for this package's external tests too.

// KeyPrefix is the tests' etcd prefix.
const KeyPrefix = "/cache"

// StartEtcd starts an in-memory etcd for the test and returns a client.
func StartEtcd(t testing.TB) *clientv3.Client {
	return etcdtest.Client(t, embeddedetcd.Config{})
}

// Fill writes n keys of each type into shard's partition, over two
// clusters, in transactions of 100.
func Fill(t testing.TB, c *clientv3.Client, shard string, types []string, n int) {
	t.Helper()
	for _, tp := range types {
		for i := 0; i < n; i += 100 {
			var ops []clientv3.Op
			for j := i; j < min(i+100, n); j++ {
				ops = append(ops, clientv3.OpPut(fmt.Sprintf("%s/%s/%s/c%d/obj-%05d", KeyPrefix, tp, shard, j%2, j), "{}"))
			}
			if _, err := c.Txn(context.Background()).Then(ops...).Commit(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// Count counts the keys below prefix.
func Count(t testing.TB, c *clientv3.Client, prefix string) int64 {
	t.Helper()
	resp, err := c.Get(context.Background(), prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return resp.Count
}

// PutHeartbeat writes shard's heartbeat, renewed at renew for lease
// seconds, and returns the revision of the write.
func PutHeartbeat(t testing.TB, c *clientv3.Client, shard string, renew time.Time, lease int) int64 {
	t.Helper()
	value := fmt.Sprintf(`{"apiVersion":"cache.kcp.io/v1alpha1","kind":"ShardHeartbeat","metadata":{"name":%q},"spec":{"renewTime":%q,"leaseDurationSeconds":%d}}`,
		shard, metav1.NewMicroTime(renew).Format(metav1.RFC3339Micro), lease)
	resp, err := c.Put(context.Background(), heartbeatKey(KeyPrefix, shard), value)
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}
