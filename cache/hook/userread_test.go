package hook_test

import (
	"context"
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/hook"
	"github.com/kcp-cache/kcp-cache/cache/replication"
	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
)

// A hook with marked workspaces keeps the shard's user-read partition next
// to its own, with its own heartbeat, so a reader knows how fresh each is;
// the shard's own partition holds none of it.
func TestHookKeepsTheUserReadPartitionWithItsHeartbeat(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	const shard = "umber"
	partition := kcpcache.UserReadPartition(shard)
	ctx := testContext(t)
	clusterRoles := schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"}
	create := func(cluster string, gvr schema.GroupVersionResource, kind, name string, annotations map[string]string) {
		t.Helper()
		u := &unstructured.Unstructured{Object: map[string]interface{}{"apiVersion": gvr.GroupVersion().String(), "kind": kind, "metadata": map[string]interface{}{"name": name}}}
		u.SetAnnotations(annotations)
		if _, err := w.localAdmin.Cluster(shard, cluster).Resource(gvr).Create(ctx, u, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	create("orga", replication.LogicalClustersGVR, "LogicalCluster", "cluster", map[string]string{kcpcache.AnnotationPath: "root:org-a", replication.AnnotationWorkspaceType: "root:organization"})
	create("orga", clusterRoles, "ClusterRole", "admin", nil)
	create("other", replication.LogicalClustersGVR, "LogicalCluster", "cluster", map[string]string{kcpcache.AnnotationPath: "root:other", replication.AnnotationWorkspaceType: "root:universal"})
	create("other", clusterRoles, "ClusterRole", "admin", nil)
	w.createLocal(t, shard, "orga", "payments", map[string]interface{}{"v": "1"})

	h := w.runHook(t, hook.Config{
		Shard:             shard,
		CacheConfig:       w.cache.ShardConfig(t, shard),
		HeartbeatInterval: heartbeatInterval,
		UserRead:          replication.Marking{Types: []string{"root:organization"}},
	})
	if h.UserRead() == nil {
		t.Fatal("no user-read controller with a marking")
	}
	f := w.confirmed(t, partition)
	// orga's LogicalCluster and ClusterRole; other's are not marked.
	if f.Objects != 2 {
		t.Errorf("the user-read heartbeat reports %d objects (%+v), want 2", f.Objects, f.Resources)
	}
	if own := w.confirmed(t, shard); own.Objects != 1 {
		t.Errorf("the shard's heartbeat reports %d objects, want its 1 APIExport", own.Objects)
	}
	cachetest.Eventually(t, "the marked ClusterRole in the user-read partition, not the other", func(ctx context.Context) error {
		list, err := w.consumer.Cluster(partition, kcpcache.Wildcard).Resource(clusterRoles).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		if len(list.Items) != 1 || list.Items[0].GetAnnotations()[kcpcache.AnnotationCluster] != "orga" {
			return fmt.Errorf("%d ClusterRoles in %s, want orga's only", len(list.Items), partition)
		}
		return nil
	})
	if list, err := w.consumer.Cluster(shard, kcpcache.Wildcard).Resource(clusterRoles).List(ctx, metav1.ListOptions{}); err != nil || len(list.Items) != 0 {
		t.Errorf("the shard's own partition holds %v ClusterRoles (%v): the user-read copies went there", list, err)
	}
}
