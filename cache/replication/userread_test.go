package replication

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/client"
	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
)

var (
	workspacesGVR          = schema.GroupVersionResource{Group: "tenancy.kcp.io", Version: "v1alpha1", Resource: "workspaces"}
	apiBindingsGVR         = schema.GroupVersionResource{Group: "apis.kcp.io", Version: "v1alpha2", Resource: "apibindings"}
	clusterRolesGVR        = schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"}
	clusterRoleBindingsGVR = schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterrolebindings"}
	rolesGVR               = schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "roles"}
	roleBindingsGVR        = schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "rolebindings"}
)

func TestMarker(t *testing.T) {
	mk := newMarker(Marking{Paths: []string{"root", "root:org-b", "1x2y3z"}, Types: []string{"root:organization"}})
	for _, tt := range []struct {
		name        string
		annotations map[string]string
		want        bool
	}{
		{"root has no path: its name is its path", map[string]string{kcpcache.AnnotationCluster: "root", AnnotationWorkspaceType: "root:root"}, true},
		{"marked by type", map[string]string{kcpcache.AnnotationCluster: "a1", kcpcache.AnnotationPath: "root:org-a", AnnotationWorkspaceType: "root:organization"}, true},
		{"marked by path", map[string]string{kcpcache.AnnotationCluster: "b1", kcpcache.AnnotationPath: "root:org-b", AnnotationWorkspaceType: "root:universal"}, true},
		{"marked by cluster name", map[string]string{kcpcache.AnnotationCluster: "1x2y3z", kcpcache.AnnotationPath: "root:org-c"}, true},
		{"a child of a marked workspace is not marked", map[string]string{kcpcache.AnnotationCluster: "t1", kcpcache.AnnotationPath: "root:org-b:team", AnnotationWorkspaceType: "root:team"}, false},
		{"a path is not a prefix", map[string]string{kcpcache.AnnotationCluster: "r2", kcpcache.AnnotationPath: "root2"}, false},
		{"no cluster annotation", map[string]string{kcpcache.AnnotationPath: "root:org-b"}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			u := &unstructured.Unstructured{}
			u.SetAnnotations(tt.annotations)
			_, got := mk.marks(u)
			if got != tt.want {
				t.Errorf("marked = %v, want %v", got, tt.want)
			}
			if _, got := mk.marks(cache.DeletedFinalStateUnknown{Obj: u}); got != tt.want {
				t.Errorf("tombstone marked = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestUserReadOptions(t *testing.T) {
	o := NewUserReadOptions()
	if o.Enabled() || len(o.Validate()) != 0 {
		t.Errorf("defaults: enabled %v, errors %v; want disabled and valid", o.Enabled(), o.Validate())
	}
	o.Workspaces = []string{"root", "root:org-a"}
	o.WorkspaceTypes = []string{"root:organization"}
	var cfg UserReadConfig
	if errs := o.Validate(); len(errs) != 0 || !o.Enabled() {
		t.Fatalf("marked: enabled %v, errors %v", o.Enabled(), errs)
	}
	if err := o.ApplyTo(&cfg); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(slices.Sorted(slices.Values(kcpcache.TypeNames(cfg.Types))), slices.Sorted(slices.Values(kcpcache.TypeNames(kcpcache.UserReadTypes())))) || len(cfg.Marking.Paths) != 2 {
		t.Errorf("applied %+v", cfg)
	}
	bad := &UserReadOptions{Workspaces: []string{"Root"}, WorkspaceTypes: []string{"organization"}, Resources: []string{"widgets.example.com"}}
	if errs := bad.Validate(); len(errs) != 3 {
		t.Errorf("invalid options: %d errors %v, want 3", len(errs), errs)
	}
}

// The user-read partition holds the user-read types of the marked
// workspaces and the RBAC of system:admin, nothing else, and follows the
// marking as LogicalClusters change; the controller writes with the shard's
// own identity, which may write its user-read partition and no other's.
func TestUserReadPartitionFollowsTheMarking(t *testing.T) {
	h := newHarness(t)
	const shard = "amber"
	partition := kcpcache.UserReadPartition(shard)
	local := func(cluster string, gvr schema.GroupVersionResource) dynamic.NamespaceableResourceInterface {
		return h.localAdmin.Cluster(shard, cluster).Resource(gvr)
	}
	lc := func(path, typ string) *unstructured.Unstructured {
		u := object(LogicalClustersGVR, "LogicalCluster", "", logicalClusterName, map[string]interface{}{})
		a := map[string]string{AnnotationWorkspaceType: typ}
		if path != "" {
			a[kcpcache.AnnotationPath] = path
		}
		u.SetAnnotations(a)
		return u
	}
	// root (no path, as kcp has it) with org-a; org-a (an organization)
	// with team; team; and the bootstrap policy.
	mustCreate(t, local("root", LogicalClustersGVR), lc("", "root:root"))
	mustCreate(t, local("root", workspacesGVR), object(workspacesGVR, "Workspace", "", "org-a", map[string]interface{}{}))
	mustCreate(t, local("root", clusterRolesGVR), object(clusterRolesGVR, "ClusterRole", "", "system:kcp:tenancy:reader", nil))
	mustCreate(t, local("orga", LogicalClustersGVR), lc("root:org-a", "root:organization"))
	mustCreate(t, local("orga", workspacesGVR), object(workspacesGVR, "Workspace", "", "team", map[string]interface{}{}))
	mustCreate(t, local("orga", apiBindingsGVR), object(apiBindingsGVR, "APIBinding", "", "tenancy.kcp.io-x", map[string]interface{}{}))
	mustCreate(t, local("orga", clusterRoleBindingsGVR), object(clusterRoleBindingsGVR, "ClusterRoleBinding", "", "workspace-admin", nil))
	mustCreate(t, local("team", LogicalClustersGVR), lc("root:org-a:team", "root:team"))
	mustCreate(t, local("team", rolesGVR).Namespace("default"), object(rolesGVR, "Role", "default", "reader", nil))
	mustCreate(t, local("team", roleBindingsGVR).Namespace("default"), object(roleBindingsGVR, "RoleBinding", "default", "readers", nil))
	mustCreate(t, local("system:admin", clusterRolesGVR), object(clusterRolesGVR, "ClusterRole", "", "cluster-admin", nil))
	mustCreate(t, local("system:admin", roleBindingsGVR).Namespace("kube-system"), object(roleBindingsGVR, "RoleBinding", "kube-system", "system:controller", nil))
	mustCreate(t, local("system:admin", apiBindingsGVR), object(apiBindingsGVR, "APIBinding", "", "not-rbac", map[string]interface{}{}))
	mustCreate(t, local("system:shard", clusterRolesGVR), object(clusterRolesGVR, "ClusterRole", "", "other-system", nil))

	localFactory := client.NewInformerFactory(h.localAdmin, kcpcache.Scope{Shard: shard, Cluster: kcpcache.Wildcard}, 0)
	ctrl, err := NewUserReadController(&UserReadConfig{
		Shard:        shard,
		CacheClient:  clusterClient(t, h.cache.ShardConfig(t, shard)),
		LocalSources: FactorySources(localFactory),
		Marking:      Marking{Paths: []string{"root"}, Types: []string{"root:organization"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(2)))))
	done := make(chan struct{})
	go func() {
		defer close(done)
		ctrl.Run(ctx, DefaultWorkers)
	}()
	localFactory.Start(ctx)
	t.Cleanup(func() {
		cancel()
		<-done
		localFactory.Shutdown()
	})

	rbacOfAdmin := []string{"clusterroles system:admin/cluster-admin", "rolebindings system:admin/kube-system/system:controller"}
	want := append([]string{
		"logicalclusters root/cluster", "workspaces root/org-a", "clusterroles root/system:kcp:tenancy:reader",
		"logicalclusters orga/cluster", "workspaces orga/team", "apibindings orga/tenancy.kcp.io-x", "clusterrolebindings orga/workspace-admin",
	}, rbacOfAdmin...)
	waitPartition(t, h, partition, want, "the marked workspaces and system:admin's RBAC")
	select {
	case <-ctrl.Controller().InitialSyncDone():
	case <-time.After(pollTimeout):
		t.Fatal("initial sync not done")
	}
	if got := partitionContents(t, h, shard); len(got) != 0 {
		t.Errorf("the shard's own partition holds %v; the user-read controller writes only %s", got, partition)
	}

	// team becomes an organization: its objects are pushed.
	mustMutate(t, local("team", LogicalClustersGVR), logicalClusterName, func(u *unstructured.Unstructured) {
		a := u.GetAnnotations()
		a[AnnotationWorkspaceType] = "root:organization"
		u.SetAnnotations(a)
	})
	want = append(want, "logicalclusters team/cluster", "roles team/default/reader", "rolebindings team/default/readers")
	waitPartition(t, h, partition, want, "team marked")

	// org-a stops being one: its copies go, root's list of it stays.
	mustMutate(t, local("orga", LogicalClustersGVR), logicalClusterName, func(u *unstructured.Unstructured) {
		a := u.GetAnnotations()
		a[AnnotationWorkspaceType] = "root:universal"
		u.SetAnnotations(a)
	})
	want = slices.DeleteFunc(want, func(s string) bool { return strings.Contains(s, " orga/") })
	waitPartition(t, h, partition, want, "org-a unmarked")

	// team's LogicalCluster goes (the workspace is deleted): so do its copies.
	mustDelete(t, local("team", LogicalClustersGVR), logicalClusterName)
	want = slices.DeleteFunc(want, func(s string) bool { return strings.Contains(s, " team/") })
	waitPartition(t, h, partition, want, "team's LogicalCluster deleted")

	// The shard's identity writes its own user-read partition, never another shard's.
	amber := clusterClient(t, h.cache.ShardConfig(t, shard))
	if _, err := amber.Cluster(partition, "root").Resource(clusterRolesGVR).Create(ctx, object(clusterRolesGVR, "ClusterRole", "", "by-hand", nil), metav1.CreateOptions{}); err != nil {
		t.Errorf("shard %s writing its user-read partition: %v", shard, err)
	}
	_, err = amber.Cluster(kcpcache.UserReadPartition("blue"), "root").Resource(clusterRolesGVR).Create(ctx, object(clusterRolesGVR, "ClusterRole", "", "by-hand", nil), metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) {
		t.Errorf("shard %s writing blue's user-read partition: %v, want 403", shard, err)
	}
	// A copy nobody selected is deleted again: nothing outside the marking stays.
	waitPartition(t, h, partition, want, "the unselected copy written by hand removed")
}

// partitionContents lists "resource cluster/[namespace/]name" of every
// user-read type in partition.
func partitionContents(t *testing.T, h *harness, partition string) []string {
	t.Helper()
	var out []string
	for _, typ := range kcpcache.UserReadTypes() {
		list, err := h.cacheAdmin.Cluster(partition, kcpcache.Wildcard).Resource(typ.GVR()).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatalf("listing %s in %s: %v", typ.Resource, partition, err)
		}
		for i := range list.Items {
			out = append(out, typ.Resource+" "+placement(&list.Items[i]))
		}
	}
	sort.Strings(out)
	return out
}

// waitPartition waits until partition holds exactly want.
func waitPartition(t *testing.T, h *harness, partition string, want []string, what string) {
	t.Helper()
	want = slices.Sorted(slices.Values(want))
	cachetest.Eventually(t, what, func(context.Context) error {
		if got := partitionContents(t, h, partition); !slices.Equal(got, want) {
			return fmt.Errorf("%s holds\n  %v\nwant\n  %v", partition, got, want)
		}
		return nil
	})
}
