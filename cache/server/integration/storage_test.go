package integration_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/options"
	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
	"github.com/kcp-cache/kcp-cache/cache/server/embeddedetcd/etcdtest"
)

// embeddedEtcdClient reaches the server's own embedded etcd with the
// server's etcd identity.
func embeddedEtcdClient(t *testing.T, srv *cachetest.Server) *clientv3.Client {
	t.Helper()
	tlsConfig, err := srv.Server().EmbeddedEtcdTLS().ClientTLSConfig()
	if err != nil {
		t.Fatal(err)
	}
	return etcdtest.Dial(t, tlsConfig, srv.Server().EmbeddedEtcdURL())
}

// --storage=memory keeps nothing on disk; a restarted server is a new etcd
// cluster and starts empty.
func TestInMemoryStorageStartsEmptyAtEveryStart(t *testing.T) {
	if testing.Short() {
		t.Skip("long scenario (several restarts): skipped with -short")
	}
	t.Parallel()
	srv := cachetest.StartServer(t, cachetest.OwnEmbeddedEtcd(func(o *options.Options) { o.EmbeddedEtcd.Storage = options.StorageMemory }))
	ctx := testContext(t)
	exports := dyn(t, srv, "amber", "root").Resource(apiExports)
	if _, err := exports.Create(ctx, apiExport("payments", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(srv.Options().RootDirectory, "etcd-server")); !os.IsNotExist(err) {
		t.Errorf("an in-memory server has an etcd directory under its root (stat: %v)", err)
	}
	first := srv.Server().EmbeddedEtcdClusterID()

	srv.RestartServer(t)
	if second := srv.Server().EmbeddedEtcdClusterID(); second == first || second == "" {
		t.Errorf("etcd cluster %q after a restart, was %q: want a new identity", second, first)
	}
	if _, err := exports.Get(ctx, "payments", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("after a restart the object is still there or unreadable: %v", err)
	}
	// And it serves writes again, for the shards to refill it.
	if _, err := exports.Create(ctx, apiExport("payments", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// After 50,000 objects are created and deleted, the embedded etcd's file
// shrinks: the apiserver compacts the history, and the member defragments
// its file once most of it is free.
func TestEmbeddedEtcdFileShrinksAfterDeletions(t *testing.T) {
	if testing.Short() {
		t.Skip("long scenario (fills and empties the etcd file): skipped with -short")
	}
	t.Parallel()
	srv := cachetest.StartServer(t, cachetest.OwnEmbeddedEtcd(func(o *options.Options) {
		o.EmbeddedEtcd.MaintenanceInterval = 200 * time.Millisecond
		o.Etcd.StorageConfig.CompactionInterval = time.Second
	}))
	ctx := testContext(t)
	etcd := embeddedEtcdClient(t, srv)
	dbFile := filepath.Join(srv.Options().RootDirectory, "etcd-server", "member", "snap", "db")
	defragsBefore := metricSum(t, srv, "kcp_cache_embedded_etcd_defragmentations_total", `result="success"`)

	// Objects as the API stores them, written in transactions of 100 by 4
	// writers: the cost is etcd's, not the API's.
	const n, perTxn, writers = 50000, 100, 4
	spec := strings.Repeat("x", 1024)
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			for i := w * perTxn; i < n; i += writers * perTxn {
				var ops []clientv3.Op
				for j := i; j < i+perTxn; j++ {
					name := fmt.Sprintf("export-%05d", j)
					value := fmt.Sprintf(`{"apiVersion":"apis.kcp.io/v1alpha1","kind":"APIExport","metadata":{"name":%q,"uid":"uid-%d","annotations":{%q:"amber",%q:"root"}},"spec":{"data":%q}}`,
						name, j, kcpcache.AnnotationShard, kcpcache.AnnotationCluster, spec)
					ops = append(ops, clientv3.OpPut(srv.EtcdPrefix()+"/apis.kcp.io/apiexports/amber/root/"+name, value))
				}
				if _, err := etcd.Txn(ctx).Then(ops...).Commit(); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	full := fileSize(t, dbFile)
	t.Logf("wrote %d objects in %s; database file %d MiB", n, time.Since(start).Round(time.Millisecond), full>>20)

	// The server saw them.
	cachetest.Eventually(t, "the objects listed", func(ctx context.Context) error {
		list, err := dyn(t, srv, "amber", "root").Resource(apiExports).List(ctx, metav1.ListOptions{Limit: 1})
		if err != nil || list.GetRemainingItemCount() == nil || *list.GetRemainingItemCount() != n-1 {
			return fmt.Errorf("not all listed yet (err %v)", err)
		}
		return nil
	})
	start = time.Now()
	partition := srv.EtcdPrefix() + "/apis.kcp.io/apiexports/amber/root/"
	for {
		resp, err := etcd.Get(ctx, partition, clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithLimit(1000))
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) == 0 {
			break
		}
		if _, err := etcd.Delete(ctx, string(resp.Kvs[0].Key), clientv3.WithRange(string(resp.Kvs[len(resp.Kvs)-1].Key)+"\x00")); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("deleted them in %s", time.Since(start).Round(time.Millisecond))

	start = time.Now()
	// At least halved: a defragmentation can run while the compaction of
	// the deleted revisions is still freeing pages, and the next one waits
	// until at least 32 MiB are free again, so the file may stay above the
	// few MiB in use (it ended at 4 MiB in most runs, at 35 MiB in one).
	// The counter is incremented once the defragmentation has returned,
	// a moment after the file was replaced: both are polled.
	cachetest.Eventually(t, "the database file shrunk by a counted defragmentation", func(context.Context) error {
		if size := fileSize(t, dbFile); size*2 > full {
			return fmt.Errorf("database file %d MiB, was %d MiB at the peak", size>>20, full>>20)
		}
		if got := metricSum(t, srv, "kcp_cache_embedded_etcd_defragmentations_total", `result="success"`); got <= defragsBefore {
			return fmt.Errorf("kcp_cache_embedded_etcd_defragmentations_total{success} = %v, want more than %v", got, defragsBefore)
		}
		return nil
	})
	t.Logf("database file %d MiB -> %d MiB, %s after the deletions", full>>20, fileSize(t, dbFile)>>20, time.Since(start).Round(time.Millisecond))
	if got := metricSum(t, srv, "kcp_cache_embedded_etcd_db_size_bytes"); got <= 0 {
		t.Errorf("kcp_cache_embedded_etcd_db_size_bytes = %v, want the file's size", got)
	}
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return info.Size()
}
