package fallback

import (
	"context"
	"fmt"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

var (
	logicalClustersResource     = schema.GroupVersionResource{Group: "core.kcp.io", Version: "v1alpha1", Resource: "logicalclusters"}
	apiBindingsResource         = schema.GroupVersionResource{Group: "apis.kcp.io", Version: "v1alpha2", Resource: "apibindings"}
	apiExportsResource          = schema.GroupVersionResource{Group: "apis.kcp.io", Version: "v1alpha2", Resource: "apiexports"}
	clusterRolesResource        = rbacv1.SchemeGroupVersion.WithResource("clusterroles")
	clusterRoleBindingsResource = rbacv1.SchemeGroupVersion.WithResource("clusterrolebindings")
	rolesResource               = rbacv1.SchemeGroupVersion.WithResource("roles")
	roleBindingsResource        = rbacv1.SchemeGroupVersion.WithResource("rolebindings")
)

// logicalClusterName is the name of the one LogicalCluster of a workspace.
const logicalClusterName = "cluster"

// snapshot is what one request's authorization read from the cache: each
// workspace's data is read once, at the first step that needs it, from the
// user-read partition of the shard that holds it.
type snapshot struct {
	f        *Fallback
	target   Target
	clusters map[string]*clusterData
}

func (f *Fallback) newSnapshot(t Target) *snapshot {
	return &snapshot{f: f, target: t, clusters: map[string]*clusterData{}}
}

// clusterData is one workspace's user-read objects.
type clusterData struct {
	name           string
	logicalCluster *unstructured.Unstructured
	clusterRoles   map[string]rbacv1.ClusterRole
	// clusterRoleBindings, and roles and roleBindings by namespace.
	clusterRoleBindings []rbacv1.ClusterRoleBinding
	roles               map[string]map[string]rbacv1.Role
	roleBindings        map[string][]rbacv1.RoleBinding
	apiBindings         []unstructured.Unstructured
}

// known reports whether the cache holds the workspace's user-read data: a
// marked workspace always has its LogicalCluster; the shard's bootstrap
// cluster always has ClusterRoles. Without either, an empty RBAC means "not
// replicated", never "no rules".
func (c *clusterData) known() bool {
	return c.logicalCluster != nil || (c.name == kcpcache.UserReadAdminCluster && len(c.clusterRoles) > 0)
}

// bindingFor returns the APIBinding whose bound resources include
// group/resource.
func (c *clusterData) bindingFor(group, resource string) (*unstructured.Unstructured, bool) {
	for i := range c.apiBindings {
		bound, _, _ := unstructured.NestedSlice(c.apiBindings[i].Object, "status", "boundResources")
		for _, b := range bound {
			m, ok := b.(map[string]any)
			if ok && m["group"] == group && m["resource"] == resource {
				return &c.apiBindings[i], true
			}
		}
	}
	return nil, false
}

// cluster reads the target shard's user-read data of cluster.
func (s *snapshot) cluster(ctx context.Context, cluster string) (*clusterData, error) {
	return s.clusterOf(ctx, s.target.Shard, cluster)
}

func (s *snapshot) clusterOf(ctx context.Context, shard, cluster string) (*clusterData, error) {
	partition := kcpcache.UserReadPartition(shard)
	key := partition + "/" + cluster
	if c, ok := s.clusters[key]; ok {
		return c, nil
	}
	c := &clusterData{name: cluster, clusterRoles: map[string]rbacv1.ClusterRole{}, roles: map[string]map[string]rbacv1.Role{}, roleBindings: map[string][]rbacv1.RoleBinding{}}
	client := s.f.client.Cluster(partition, cluster)
	// resourceVersion "0": served from the cache's watch cache without a
	// freshness check, so that a cache whose own home is gone still answers;
	// what a read may conclude from its age is the Warning's business.
	list := metav1.ListOptions{ResourceVersion: "0"}

	lc, err := client.Resource(logicalClustersResource).Get(ctx, logicalClusterName, metav1.GetOptions{ResourceVersion: "0"})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return nil, cacheError("LogicalCluster", partition, cluster, err)
	default:
		c.logicalCluster = lc
	}
	if err := listInto(ctx, client.Resource(clusterRolesResource), list, func(r rbacv1.ClusterRole) { c.clusterRoles[r.Name] = r }); err != nil {
		return nil, cacheError("ClusterRoles", partition, cluster, err)
	}
	if err := listInto(ctx, client.Resource(clusterRoleBindingsResource), list, func(b rbacv1.ClusterRoleBinding) {
		c.clusterRoleBindings = append(c.clusterRoleBindings, b)
	}); err != nil {
		return nil, cacheError("ClusterRoleBindings", partition, cluster, err)
	}
	if err := listInto(ctx, client.Resource(rolesResource), list, func(r rbacv1.Role) {
		if c.roles[r.Namespace] == nil {
			c.roles[r.Namespace] = map[string]rbacv1.Role{}
		}
		c.roles[r.Namespace][r.Name] = r
	}); err != nil {
		return nil, cacheError("Roles", partition, cluster, err)
	}
	if err := listInto(ctx, client.Resource(roleBindingsResource), list, func(b rbacv1.RoleBinding) {
		c.roleBindings[b.Namespace] = append(c.roleBindings[b.Namespace], b)
	}); err != nil {
		return nil, cacheError("RoleBindings", partition, cluster, err)
	}
	bindings, err := client.Resource(apiBindingsResource).List(ctx, list)
	if err != nil {
		return nil, cacheError("APIBindings", partition, cluster, err)
	}
	c.apiBindings = bindings.Items
	s.clusters[key] = c
	return c, nil
}

// apiExport finds APIExport name in cluster in whichever shard's partition
// holds it (kcp's own replication pushes every APIExport), and returns nil
// when none does.
func (s *snapshot) apiExport(ctx context.Context, cluster, name string) (*unstructured.Unstructured, error) {
	list, err := s.f.client.Cluster(kcpcache.Wildcard, cluster).Resource(apiExportsResource).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		return nil, cacheError("APIExports", kcpcache.Wildcard, cluster, err)
	}
	for i := range list.Items {
		if list.Items[i].GetName() == name {
			return &list.Items[i], nil
		}
	}
	return nil, nil
}

// exportShard is the shard an APIExport read from the cache came from.
func exportShard(export *unstructured.Unstructured) string {
	return export.GetAnnotations()[kcpcache.AnnotationShard]
}

type lister interface {
	List(ctx context.Context, opts metav1.ListOptions) (*unstructured.UnstructuredList, error)
}

// listInto lists r and hands each item to add, converted to T.
func listInto[T any](ctx context.Context, r lister, opts metav1.ListOptions, add func(T)) error {
	list, err := r.List(ctx, opts)
	if err != nil {
		return err
	}
	for i := range list.Items {
		var obj T
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(list.Items[i].Object, &obj); err != nil {
			return fmt.Errorf("%s %s: %w", list.Items[i].GetKind(), list.Items[i].GetName(), err)
		}
		add(obj)
	}
	return nil
}

// cacheUnavailable is a read of the cache that failed: the fallback cannot
// vouch for anything then, and answers 503 naming the shard and the cache.
type cacheUnavailable struct {
	what string
	err  error
}

func (e *cacheUnavailable) Error() string { return e.what + ": " + e.err.Error() }
func (e *cacheUnavailable) Unwrap() error { return e.err }

func cacheError(what, partition, cluster string, err error) error {
	return &cacheUnavailable{what: fmt.Sprintf("reading %s of shards/%s/clusters/%s from the cache", what, partition, cluster), err: err}
}

func unstructuredString(obj map[string]any, fields ...string) (string, bool, error) {
	return unstructured.NestedString(obj, fields...)
}

func unstructuredMap(obj map[string]any, fields ...string) (map[string]any, bool, error) {
	return unstructured.NestedMap(obj, fields...)
}
