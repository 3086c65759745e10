package integration_test

import (
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kcp-cache/kcp-cache/cache/options"
	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
	"github.com/kcp-cache/kcp-cache/cache/server/filters"
)

// TestMemoryLimitRefusesNewObjectsOnly: a server whose live data reaches
// its share of --memory-limit answers a create 507 InsufficientStorage
// with its reason, stores nothing of it, and keeps serving reads, updates
// and deletes. The limit is set a little above what this test process
// holds already (the server runs in it).
func TestMemoryLimitRefusesNewObjectsOnly(t *testing.T) {
	runtime.GC()
	// The server's own start takes some 50 MiB of live heap of this.
	const headroom = 96 << 20
	limit := (int64(filters.LiveHeap()) + headroom) * 100 / options.FullPercent
	srv := cachetest.StartServer(t, cachetest.WithFlags(func(o *options.Options) {
		o.Limits.MemoryLimit = fmt.Sprint(limit)
	}))
	ctx := testContext(t)
	exports := dyn(t, srv, "amber", "root").Resource(apiExports)
	payload := strings.Repeat("x", 512<<10)
	var refused error
	created := 0
	// At most twice the headroom in objects: the server must refuse before.
	for i := 0; i < 2*headroom/(512<<10) && refused == nil; i++ {
		_, err := exports.Create(ctx, apiExport(fmt.Sprintf("big-%03d", i), map[string]interface{}{"payload": payload}), metav1.CreateOptions{})
		switch {
		case err == nil:
			created++
		default:
			refused = err
		}
	}
	if refused == nil {
		t.Fatalf("%d objects of 512 KiB created, none refused: the memory limit (%d MiB) is not enforced", created, limit>>20)
	}
	status, ok := refused.(apierrors.APIStatus)
	if !ok || status.Status().Code != http.StatusInsufficientStorage || status.Status().Reason != filters.ReasonInsufficientStorage {
		t.Fatalf("after %d creates: %v, want 507 %s", created, refused, filters.ReasonInsufficientStorage)
	}
	t.Logf("refused after %d objects of 512 KiB: %s", created, status.Status().Message)
	if created == 0 {
		t.Fatal("the first create was refused: the test's limit leaves no room")
	}
	// Nothing of the refused create is stored; reads, updates and deletes
	// go on.
	if _, err := exports.Get(ctx, fmt.Sprintf("big-%03d", created), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the refused object: %v, want 404", err)
	}
	list, err := exports.List(ctx, metav1.ListOptions{})
	if err != nil || len(list.Items) != created {
		t.Fatalf("list while full: %d items, %v; want %d", len(list.Items), err, created)
	}
	first := list.Items[0]
	first.Object["spec"] = map[string]interface{}{"payload": "small"}
	if _, err := exports.Update(ctx, &first, metav1.UpdateOptions{}); err != nil {
		t.Errorf("update while full: %v", err)
	}
	if err := exports.Delete(ctx, list.Items[1].GetName(), metav1.DeleteOptions{}); err != nil {
		t.Errorf("delete while full: %v", err)
	}
}
