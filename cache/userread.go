package cache

import "strings"

// The user-read partitions hold, for the workspaces an operator marks as
// critical (organizations, say), what kcp's users read there and what
// authorization needs, so that kcp's front-proxy can answer reads of a lost
// shard's workspaces from the cache (cache/fallback).
//
// They are partitions of their own, next to the shard's: kcp's replication
// controller owns its shard's partition and deletes every copy there that its
// own filters do not select (kcp's pkg/reconciler/cache/replication treats a
// filtered-out local object as absent), so ClusterRoles, ClusterRoleBindings
// and LogicalClusters pushed for users into shards/<shard> would be deleted
// as soon as kcp's controller saw them. The name is the shard's followed by
// UserReadSuffix; a kcp shard's name is a DNS subdomain and never holds a
// colon, so no real shard can be named like a user-read partition.
const UserReadSuffix = ":readonly"

// UserReadAdminCluster is the logical cluster that holds a kcp shard's
// bootstrap policy (kcp's controlplaneapiserver.LocalAdminCluster). kcp's
// authorizers merge its ClusterRoles into every workspace's and evaluate its
// bindings for every request, so its RBAC is pushed into the user-read
// partition too, although it is a system cluster.
const UserReadAdminCluster = "system:admin"

// UserReadPartition is the user-read partition of shard.
func UserReadPartition(shard string) string { return shard + UserReadSuffix }

// UserReadShard returns the shard whose user-read partition is partition,
// and false when partition is not a user-read partition.
func UserReadShard(partition string) (string, bool) {
	shard, ok := strings.CutSuffix(partition, UserReadSuffix)
	return shard, ok && shard != ""
}

// UserReadTypes are the types pushed into a user-read partition by default,
// for every marked workspace: the child Workspaces (what `kubectl get
// workspaces` lists), the workspace's LogicalCluster (its phase and required
// groups), its APIBindings (which APIExport, and so which maximal permission
// policy, serves a bound resource), and its RBAC.
func UserReadTypes() []Type {
	v1alpha1 := []string{"v1alpha1"}
	rbac := func(resource, kind string, namespaced bool) Type {
		return Type{Group: "rbac.authorization.k8s.io", Resource: resource, Kind: kind, Versions: []string{"v1"}, StorageVersion: "v1",
			Namespaced: namespaced, PathSegmentNames: true}
	}
	return []Type{
		{Group: "tenancy.kcp.io", Resource: "workspaces", Kind: "Workspace", Versions: v1alpha1, StorageVersion: "v1alpha1"},
		{Group: "core.kcp.io", Resource: "logicalclusters", Kind: "LogicalCluster", Versions: v1alpha1, StorageVersion: "v1alpha1"},
		{Group: "apis.kcp.io", Resource: "apibindings", Kind: "APIBinding", Versions: []string{"v1alpha1", "v1alpha2"}, StorageVersion: "v1alpha2"},
		rbac("clusterroles", "ClusterRole", false),
		rbac("clusterrolebindings", "ClusterRoleBinding", false),
		rbac("roles", "Role", true),
		rbac("rolebindings", "RoleBinding", true),
	}
}
