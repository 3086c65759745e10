package server_test

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
)

func TestSmoke(t *testing.T) {
	srv := cachetest.StartServer(t)
	ctx := testContext(t)
	if _, err := dyn(t, srv, "amber", "root").Resource(apiExports).Create(ctx, apiExport("a", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	list, err := dyn(t, srv, "*", "*").Resource(apiExports).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 {
		t.Fatalf("got %d", len(list.Items))
	}
	t.Logf("%v", list.Items[0].GetAnnotations())
	t.Logf("%v", srv.EtcdKeys(t, "/"))
}
