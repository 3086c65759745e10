package fallback

import (
	"context"
	"fmt"
	"slices"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apiserver/pkg/authentication/user"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

// The names below are kcp's (v0.32.3): pkg/authorization,
// pkg/authorization/bootstrap and sdk/apis/apis/v1alpha1. The fallback must
// decide with the same constants the shard's authorizers use.
const (
	// requiredGroupsAnnotation lists, on a LogicalCluster, the groups a user
	// must be in: clauses separated by ";", groups of a clause by ",".
	requiredGroupsAnnotation = "authorization.kcp.io/required-groups"
	// kcpAdminGroup and workspaceBootstrapperGroup always satisfy the
	// required groups.
	kcpAdminGroup              = "system:kcp:admin"
	workspaceBootstrapperGroup = "system:kcp:tenancy:workspace-bootstrapper"
	// maximalPermissionPolicyPrefix prefixes the user and groups that an
	// APIExport's maximal permission policy is evaluated for.
	maximalPermissionPolicyPrefix = "apis.kcp.io:binding:"
	// kcpAuthorizationExtraPrefix starts the user extras by which kcp scopes
	// or extends a user (scopes, warrants): the fallback does not evaluate
	// them and so refuses such users.
	kcpAuthorizationExtraPrefix = "authorization.kcp.io/"
	serviceAccountPrefix        = "system:serviceaccount:"
)

// internalGroups are identities of kcp's own components that kcp's
// authorizers let past the workspace checks. They are not users, and the
// fallback does not reproduce those shortcuts: it refuses them.
var internalGroups = []string{"system:kcp:logical-cluster-admin", "system:kcp:external-logical-cluster-admin"}

// contentPhases are the LogicalCluster phases in which kcp lets a user with
// access read a workspace's content (02-content, workspace_content_authorizer.go).
var contentPhases = []string{"Initializing", "Ready", "Inactive", "Terminating", "Deleting"}

// decision is the fallback's answer for one request.
type decision struct {
	allowed bool
	// reason says why, for the 403's message and the log.
	reason string
}

func deny(format string, args ...any) decision {
	return decision{reason: fmt.Sprintf(format, args...)}
}

// authorize decides a read as the lost shard's authorizer chain would, from
// what the user-read partitions hold, or denies. Every step is one of kcp's
// (pkg/server/options/authorization.go orders them), in the same order:
//
//	always-allow groups → 01-requiredgroups → 02-content (phase, verb=access
//	on /) → 04-maxpermissionpolicy → union(05-bootstrap, 05-local)
//
// Where the shard would look at something the fallback does not hold or
// does not model (scopes and warrants, service accounts, kcp's internal
// identities, a binding's APIExport or its cluster's RBAC, the shard's
// webhook authorizer, the global RBAC of another shard's workspace), it
// denies: an allow of the fallback is always one the shard's own rules, as
// replicated, would give. 05-global (RBAC of the same workspace read from
// the cache) adds nothing the workspace's own RBAC does not hold here, and
// 03-systemcrd restricts writes only.
func (f *Fallback) authorize(ctx context.Context, data *snapshot, u user.Info, a attributes) (decision, error) {
	if u == nil {
		return deny("the request carries no user"), nil
	}
	groups := effectiveGroups(u)
	for _, g := range f.privilegedGroups {
		if slices.Contains(groups, g) {
			return decision{allowed: true, reason: "member of the always-allowed group " + g}, nil
		}
	}
	for k := range u.GetExtra() {
		if strings.HasPrefix(k, kcpAuthorizationExtraPrefix) {
			return deny("user extra %q (kcp scopes or warrants) is not evaluated by the fallback", k), nil
		}
	}
	for _, g := range internalGroups {
		if slices.Contains(groups, g) {
			return deny("group %s is one of kcp's internal identities, whose shortcuts the fallback does not reproduce", g), nil
		}
	}
	if strings.HasPrefix(u.GetName(), serviceAccountPrefix) {
		return deny("service accounts are scoped to their workspace by the shard, which the fallback does not reproduce"), nil
	}
	a.user = subjectUser{name: u.GetName(), groups: groups}

	cluster, err := data.cluster(ctx, data.target.Cluster)
	if err != nil {
		return decision{}, err
	}
	if cluster.logicalCluster == nil {
		return deny("the cache holds no LogicalCluster of %s: the workspace is not marked for the fallback, or its shard never pushed it", data.target.Cluster), nil
	}

	// 01-requiredgroups.
	if required, ok := cluster.logicalCluster.GetAnnotations()[requiredGroupsAnnotation]; ok {
		if !inRequiredGroups(required, groups) {
			return deny("not a member of the workspace's required groups %q", required), nil
		}
	}

	// 02-content: the workspace's phase, then verb=access on "/" from the
	// workspace's bindings and the shard's bootstrap bindings, roles looked
	// up in the workspace first.
	phase, _, _ := unstructuredString(cluster.logicalCluster.Object, "status", "phase")
	if !slices.Contains(contentPhases, phase) {
		return deny("the workspace's phase %q gives no access to its content", phase), nil
	}
	admin, err := data.cluster(ctx, kcpcache.UserReadAdminCluster)
	if err != nil {
		return decision{}, err
	}
	if !admin.known() {
		return deny("the cache holds none of the shard's bootstrap policy (%s)", kcpcache.UserReadAdminCluster), nil
	}
	access := policy{
		clusterRoleBindings: append(slices.Clip(cluster.clusterRoleBindings), admin.clusterRoleBindings...),
		clusterRoles:        []map[string]rbacv1.ClusterRole{cluster.clusterRoles, admin.clusterRoles},
	}
	accessAttr := attributes{user: a.user, verb: "access", path: "/"}
	if ok, _ := access.allows(accessAttr); !ok {
		return deny("no verb=access on / in workspace %s", data.target.Cluster), nil
	}

	// 04-maxpermissionpolicy, for a resource that an APIBinding provides.
	if a.path == "" {
		if d, err := f.maximalPermissionPolicy(ctx, data, cluster, admin, a); err != nil || !d.allowed {
			return d, err
		}
	}

	// 05: the shard's bootstrap policy, then the workspace's own RBAC.
	ns := a.namespace
	bootstrap := policy{
		clusterRoleBindings: admin.clusterRoleBindings,
		roleBindings:        admin.roleBindings[ns],
		clusterRoles:        []map[string]rbacv1.ClusterRole{admin.clusterRoles},
		roles:               []map[string]rbacv1.Role{admin.roles[ns]},
	}
	if ok, why := bootstrap.allows(a); ok {
		return decision{allowed: true, reason: "the shard's bootstrap policy: " + why}, nil
	}
	local := policy{
		clusterRoleBindings: cluster.clusterRoleBindings,
		roleBindings:        cluster.roleBindings[ns],
		clusterRoles:        []map[string]rbacv1.ClusterRole{cluster.clusterRoles, admin.clusterRoles},
		roles:               []map[string]rbacv1.Role{cluster.roles[ns], admin.roles[ns]},
	}
	if ok, why := local.allows(a); ok {
		return decision{allowed: true, reason: "workspace RBAC: " + why}, nil
	}
	return deny("no RBAC rule of workspace %s or of the shard's bootstrap policy allows %s", data.target.Cluster, a), nil
}

// maximalPermissionPolicy is kcp's 04-maxpermissionpolicy: a resource bound
// from an APIExport with a local maximal permission policy must also be
// allowed, for the prefixed user, by the RBAC of the export's workspace.
// Unlike kcp, which delegates when it finds no export, the fallback denies
// when it cannot find the export or its workspace's RBAC in the cache: it
// cannot tell "no export" from "not replicated".
func (f *Fallback) maximalPermissionPolicy(ctx context.Context, data *snapshot, cluster, admin *clusterData, a attributes) (decision, error) {
	binding, ok := cluster.bindingFor(a.group, strings.SplitN(a.resource, "/", 2)[0])
	if !ok {
		return decision{allowed: true, reason: "no APIBinding provides the resource"}, nil
	}
	exportCluster, _, _ := unstructuredString(binding.Object, "status", "apiExportClusterName")
	exportName, _, _ := unstructuredString(binding.Object, "spec", "reference", "export", "name")
	if exportCluster == "" || exportName == "" {
		return deny("APIBinding %s names no bound APIExport cluster", binding.GetName()), nil
	}
	export, err := data.apiExport(ctx, exportCluster, exportName)
	if err != nil {
		return decision{}, err
	}
	if export == nil {
		return deny("APIExport %s|%s of APIBinding %s is not in the cache", exportCluster, exportName, binding.GetName()), nil
	}
	mpp, found, _ := unstructuredMap(export.Object, "spec", "maximalPermissionPolicy")
	if !found || mpp["local"] == nil {
		return decision{allowed: true, reason: "the APIExport has no local maximal permission policy"}, nil
	}
	exportData, err := data.clusterOf(ctx, exportShard(export), exportCluster)
	if err != nil {
		return decision{}, err
	}
	if !exportData.known() {
		return deny("the RBAC of APIExport %s|%s's workspace is not in the cache (mark that workspace)", exportCluster, exportName), nil
	}
	prefixed := a
	prefixed.user = subjectUser{name: maximalPermissionPolicyPrefix + a.user.name}
	for _, g := range a.user.groups {
		prefixed.user.groups = append(prefixed.user.groups, maximalPermissionPolicyPrefix+g)
	}
	ns := a.namespace
	p := policy{
		clusterRoleBindings: exportData.clusterRoleBindings,
		roleBindings:        exportData.roleBindings[ns],
		clusterRoles:        []map[string]rbacv1.ClusterRole{exportData.clusterRoles, admin.clusterRoles},
		roles:               []map[string]rbacv1.Role{exportData.roles[ns], admin.roles[ns]},
	}
	if ok, _ := p.allows(prefixed); !ok {
		return deny("APIExport %s|%s's maximal permission policy does not allow %s", exportCluster, exportName, a), nil
	}
	return decision{allowed: true}, nil
}

// effectiveGroups are the user's groups as the shard sees them: the shard
// authenticates the front-proxy's headers with upstream's authenticator
// chain, whose AuthenticatedGroupAdder adds system:authenticated to every
// user but the anonymous one.
func effectiveGroups(u user.Info) []string {
	groups := slices.Clone(u.GetGroups())
	if u.GetName() == user.Anonymous {
		return groups
	}
	if !slices.Contains(groups, user.AllAuthenticated) && !slices.Contains(groups, user.AllUnauthenticated) {
		groups = append(groups, user.AllAuthenticated)
	}
	return groups
}

// inRequiredGroups is kcp's clause check: the user must hold every group of
// one clause; kcp adds the admin and bootstrapper groups as clauses.
func inRequiredGroups(required string, groups []string) bool {
	clauses := append(strings.Split(required, ";"), kcpAdminGroup, workspaceBootstrapperGroup)
	for _, clause := range clauses {
		all := true
		for _, g := range strings.Split(clause, ",") {
			if !slices.Contains(groups, g) {
				all = false
				break
			}
		}
		if all {
			return true
		}
	}
	return false
}

func (a attributes) String() string {
	if a.path != "" {
		return fmt.Sprintf("%s %s", a.verb, a.path)
	}
	what := a.resource
	if a.group != "" {
		what += "." + a.group
	}
	if a.name != "" {
		what += " " + a.name
	}
	if a.namespace != "" {
		what += " in namespace " + a.namespace
	}
	return a.verb + " " + what
}
