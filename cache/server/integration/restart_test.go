package integration_test

import (
	"reflect"
	"strconv"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
)

// After a restart the watch cache is rebuilt from etcd. Built with
// client-go's watch-list it would keep one of several same-named objects;
// the partitioned storage declares watch-list unsupported.
func TestRestartKeepsEveryPartition(t *testing.T) {
	t.Parallel()
	srv := cachetest.StartServer(t)
	ctx := testContext(t)
	for _, p := range partitions {
		if _, err := dyn(t, srv, p[0], p[1]).Resource(apiExports).Create(ctx, apiExport("shared", nil), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	before, err := dyn(t, srv, "*", "*").Resource(apiExports).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}

	srv.RestartServer(t)

	after, err := dyn(t, srv, "*", "*").Resource(apiExports).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := partitionsOf(after.Items), partitionsOf(before.Items); !reflect.DeepEqual(got, want) || len(got) != len(partitions) {
		t.Fatalf("after restart: %v, before: %v", got, want)
	}
	// Also served from the cache with resourceVersion=0 (no etcd round trip).
	cached, err := dyn(t, srv, "*", "root").Resource(apiExports).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		t.Fatal(err)
	}
	if len(cached.Items) != 2 {
		t.Errorf("cached */root list after restart has %d objects, want 2", len(cached.Items))
	}

	created, err := dyn(t, srv, "amber", "root").Resource(apiExports).Create(ctx, apiExport("later", nil), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rvBefore, _ := strconv.ParseUint(before.GetResourceVersion(), 10, 64)
	rvAfter, _ := strconv.ParseUint(created.GetResourceVersion(), 10, 64)
	if rvAfter <= rvBefore {
		t.Errorf("resourceVersion went backwards across a restart: %d then %d", rvBefore, rvAfter)
	}
}
