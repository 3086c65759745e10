package integration_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kcp-cache/kcp-cache/cache/options"
	"github.com/kcp-cache/kcp-cache/cache/server/bootstrap"
	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
	"github.com/kcp-cache/kcp-cache/cache/server/filters"
)

// isInsufficientStorage reports whether err is a 507 with the reason and a
// message saying that nothing was written.
func isInsufficientStorage(err error) bool {
	status, ok := err.(apierrors.APIStatus)
	return ok && status.Status().Code == http.StatusInsufficientStorage && status.Status().Reason == filters.ReasonInsufficientStorage &&
		strings.Contains(status.Status().Message, "nothing was written")
}

// etcdKeysNamed are the keys of the server's own embedded etcd whose last
// segment is name.
func etcdKeysNamed(ctx context.Context, t *testing.T, etcd *clientv3.Client, name string) []string {
	t.Helper()
	resp, err := etcd.Get(ctx, options.DefaultEtcdPrefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, kv := range resp.Kvs {
		if strings.HasSuffix(string(kv.Key), "/"+name) {
			out = append(out, string(kv.Key))
		}
	}
	return out
}

// TestDiskGuardRefusesPartitionWritesAndStoresNothing: a server whose
// embedded etcd's disk has less free space than
// --embedded-etcd-min-free-disk-bytes (here a threshold above any real
// disk's free space) starts, stays ready, answers a create, an update and
// a patch of a partition object 507 InsufficientStorage with its reason,
// stores nothing of them, and serves reads, deletes and the system
// partition's writes (a CRD).
func TestDiskGuardRefusesPartitionWritesAndStoresNothing(t *testing.T) {
	t.Parallel()
	var minFree atomic.Int64
	srv := cachetest.StartServer(t, cachetest.OwnEmbeddedEtcd(func(o *options.Options) {
		o.EmbeddedEtcd.MinFreeDiskBytes = minFree.Load()
	}))
	ctx := testContext(t)
	exports := dyn(t, srv, "amber", "root").Resource(apiExports)
	if _, err := exports.Create(ctx, apiExport("kept", map[string]interface{}{"v": "before"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := exports.Create(ctx, apiExport("deleted", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The start itself writes (the CRDs, the epoch): it must go on below
	// the minimum, or a server restarted on a nearly full disk would not
	// start.
	minFree.Store(1 << 62)
	srv.RestartServer(t)
	if err := cachetest.WaitForPath(ctx, srv.Config(), "/readyz"); err != nil {
		t.Fatalf("/readyz below the minimum: %v, want ready (reads are served)", err)
	}

	_, createErr := exports.Create(ctx, apiExport("refused", nil), metav1.CreateOptions{})
	kept, err := exports.Get(ctx, "kept", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("a read below the minimum: %v", err)
	}
	kept.Object["spec"] = map[string]interface{}{"v": "updated"}
	_, updateErr := exports.Update(ctx, kept, metav1.UpdateOptions{})
	_, patchErr := exports.Patch(ctx, "kept", types.MergePatchType, []byte(`{"spec":{"v":"patched"}}`), metav1.PatchOptions{})
	for what, err := range map[string]error{"create": createErr, "update": updateErr, "patch": patchErr} {
		if !isInsufficientStorage(err) {
			t.Errorf("a %s below the minimum: %v, want 507 %s saying nothing was written", what, err, filters.ReasonInsufficientStorage)
		}
	}
	if createErr != nil {
		t.Logf("the refusal: %v", createErr)
	}

	// Nothing of the refused writes is stored: not in the API, not in etcd.
	if _, err := exports.Get(ctx, "refused", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the refused create: %v, want 404", err)
	}
	etcd := embeddedEtcdClient(t, srv)
	if keys := etcdKeysNamed(ctx, t, etcd, "refused"); len(keys) > 0 {
		t.Errorf("the refused create is in etcd: %v", keys)
	}
	if got, err := exports.Get(ctx, "kept", metav1.GetOptions{}); err != nil || got.Object["spec"].(map[string]interface{})["v"] != "before" || got.GetResourceVersion() != kept.GetResourceVersion() {
		t.Errorf("the object refused an update and a patch: %v, %v; want it unchanged", got, err)
	}

	// Reads, deletes and the system partition's writes go on.
	if list, err := exports.List(ctx, metav1.ListOptions{}); err != nil || len(list.Items) != 2 {
		t.Errorf("a list below the minimum: %v, %v; want the two objects", list, err)
	}
	if err := exports.Delete(ctx, "deleted", metav1.DeleteOptions{}); err != nil {
		t.Errorf("a delete below the minimum: %v", err)
	}
	srv.InstallCRD(t, bootstrap.CRDNames{Group: "example.dev", Version: "v1", Resource: "gadgets", Kind: "Gadget"})

	// Space again (the guard off here): writes are taken.
	minFree.Store(0)
	srv.RestartServer(t)
	if _, err := exports.Create(ctx, apiExport("refused", nil), metav1.CreateOptions{}); err != nil {
		t.Errorf("a create with the guard off: %v", err)
	}
}

// TestEtcdQuotaAnswers507: a write that etcd refuses for its quota
// (--embedded-etcd-quota-backend-bytes; "mvcc: database space exceeded")
// is answered 507 InsufficientStorage with its reason, not 500, and is
// not stored; reads and deletes go on.
func TestEtcdQuotaAnswers507(t *testing.T) {
	t.Parallel()
	// Room for a start (the bootstrapped CRDs) and a few MiB of objects.
	const quota = 24 << 20
	srv := cachetest.StartServer(t, cachetest.OwnEmbeddedEtcd(func(o *options.Options) {
		o.EmbeddedEtcd.QuotaBackendBytes = quota
		o.EmbeddedEtcd.MinFreeDiskBytes = 0
	}))
	ctx := testContext(t)
	// client-go retries a 5xx only with Retry-After, which a 507 has not:
	// every answer is the server's first.
	exports := dyn(t, srv, "amber", "root").Resource(apiExports)
	payload := strings.Repeat("x", 512<<10)
	var refused error
	created := 0
	// At most twice the quota in objects: etcd must refuse before.
	for i := 0; i < 2*quota/(512<<10) && refused == nil; i++ {
		if _, err := exports.Create(ctx, apiExport(fmt.Sprintf("big-%03d", i), map[string]interface{}{"payload": payload}), metav1.CreateOptions{}); err != nil {
			refused = err
		} else {
			created++
		}
	}
	if refused == nil {
		t.Fatalf("%d objects of 512 KiB created in a database of %d MiB: the quota was not reached", created, quota>>20)
	}
	if !isInsufficientStorage(refused) || !strings.Contains(refused.Error(), "database space exceeded") {
		t.Fatalf("after %d creates: %v, want 507 %s naming etcd's quota", created, refused, filters.ReasonInsufficientStorage)
	}
	t.Logf("refused after %d objects of 512 KiB: %v", created, refused)
	name := fmt.Sprintf("big-%03d", created)
	if _, err := exports.Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the refused create: %v, want 404", err)
	}
	// An update is refused the same way (etcd's alarm is raised: every
	// write that adds data); a delete goes on.
	first, err := exports.Get(ctx, "big-000", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	first.Object["spec"] = map[string]interface{}{"payload": "small"}
	if _, err := exports.Update(ctx, first, metav1.UpdateOptions{}); !isInsufficientStorage(err) {
		t.Errorf("an update at the quota: %v, want 507 %s", err, filters.ReasonInsufficientStorage)
	}
	if err := exports.Delete(ctx, "big-001", metav1.DeleteOptions{}); err != nil {
		t.Errorf("a delete at the quota: %v", err)
	}
}
