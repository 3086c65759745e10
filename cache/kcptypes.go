package cache

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// AnnotationReplicate marks the objects of selectively replicated types
// (ClusterRoles, ClusterRoleBindings, LogicalClusters) that a kcp shard
// pushes into the cache; any non-empty value selects an object.
const AnnotationReplicate = "internal.kcp.io/replicate"

// ReplicatePolicy says which of a shard's objects of a type are pushed.
type ReplicatePolicy int

const (
	// ReplicateNone: the cache serves the type, a shard pushes nothing of it.
	ReplicateNone ReplicatePolicy = iota
	// ReplicateAll: every object outside system:* clusters is pushed.
	ReplicateAll
	// ReplicateAnnotated: only objects with AnnotationReplicate are pushed.
	ReplicateAnnotated
)

// Type is one type of the cache's type profile: everything the server
// needs to declare it, replication to push it and consumers to watch it.
type Type struct {
	Group    string
	Resource string
	Kind     string
	// Versions are served, oldest first; every one reads and writes the
	// same objects (no conversion). A version that was ever StorageVersion
	// must stay in the list.
	Versions []string
	// StorageVersion is the version objects are written as, and the one
	// kcp's shards read and write (apiexports: v1alpha2).
	StorageVersion string
	Namespaced     bool
	// PathSegmentNames relaxes the name rule from DNS-1123 subdomains to
	// path segments, as kcp does for RBAC (names like "system:kcp:...").
	PathSegmentNames bool
	// Replicate is what a kcp shard pushes of this type.
	Replicate ReplicatePolicy
	// Releases are the kcp release lines whose shards use the type (read
	// it from the cache, push it); empty means every line. The server
	// serves the types of every line at once, so that shards of two lines
	// share one cache during an upgrade.
	Releases []KcpRelease
}

// KcpRelease is a line of kcp releases whose shards use the same types.
type KcpRelease string

const (
	// KcpV032 is kcp v0.32 (v0.32.3 and its patch releases).
	KcpV032 KcpRelease = "v0.32"
	// KcpMain is kcp's main branch as of August 2026: it renamed
	// cachedresources and cachedresourceendpointslices to
	// clustercachedresources and clustercachedresourceendpointslices
	// (kcp PR 4281, no migration), and uses nothing else new of the cache.
	KcpMain KcpRelease = "main"
)

// DefaultKcpRelease is the line a shard belongs to when nothing says
// otherwise: the latest kcp release.
const DefaultKcpRelease = KcpV032

// KcpReleases are the known lines, oldest first.
func KcpReleases() []KcpRelease { return []KcpRelease{KcpV032, KcpMain} }

// UsedBy reports whether shards of release use the type.
func (t Type) UsedBy(release KcpRelease) bool {
	return len(t.Releases) == 0 || slices.Contains(t.Releases, release)
}

// GroupResource is the type's group and resource.
func (t Type) GroupResource() schema.GroupResource {
	return schema.GroupResource{Group: t.Group, Resource: t.Resource}
}

// GVR is the type under its storage version, the one shards use.
func (t Type) GVR() schema.GroupVersionResource {
	return t.GroupResource().WithVersion(t.StorageVersion)
}

// Name is the type's "resource.group", the name of its CRD and the form
// --bootstrap-types takes.
func (t Type) Name() string { return t.Resource + "." + t.Group }

// KcpTypes is the type profile of kcp installations of every known release
// line (KcpReleases): the types kcp's own cache server declares
// (pkg/cache/server/bootstrap and config/crds of kcp, schemas and
// subresources dropped), the version kcp's shards use, what kcp's
// replication controller pushes (pkg/reconciler/cache/replication there),
// and which lines use each type. A kcp shard opens a wildcard informer on
// every type of its line, and on the CRDs, and is not ready until each has
// synced: all must be served from the start. Serving the types of every
// line lets shards of v0.32 and of main share one cache (a mixed-version
// kcp during an upgrade); kcp main's cache bootstraps the same set with the
// two cachedresource types renamed.
//
// kcp pushes mutating admission policies (and their bindings) only with its
// MutatingAdmissionPolicy feature gate on; they are marked replicated here,
// and a host without them locally drops them from its replicated set.
func KcpTypes() []Type {
	v1alpha1 := []string{"v1alpha1"}
	v1 := []string{"v1"}
	kcp := func(group, resource, kind string, replicate ReplicatePolicy, releases ...KcpRelease) Type {
		return Type{Group: group, Resource: resource, Kind: kind, Versions: v1alpha1, StorageVersion: "v1alpha1", Replicate: replicate, Releases: releases}
	}
	rbac := func(resource, kind string, namespaced bool, replicate ReplicatePolicy) Type {
		return Type{Group: "rbac.authorization.k8s.io", Resource: resource, Kind: kind, Versions: v1, StorageVersion: "v1",
			Namespaced: namespaced, PathSegmentNames: true, Replicate: replicate}
	}
	admission := func(resource, kind string) Type {
		return Type{Group: "admissionregistration.k8s.io", Resource: resource, Kind: kind, Versions: v1, StorageVersion: "v1", Replicate: ReplicateAll}
	}
	return []Type{
		{Group: "apis.kcp.io", Resource: "apiexports", Kind: "APIExport", Versions: []string{"v1alpha1", "v1alpha2"}, StorageVersion: "v1alpha2", Replicate: ReplicateAll},
		kcp("apis.kcp.io", "apiresourceschemas", "APIResourceSchema", ReplicateAll),
		kcp("apis.kcp.io", "apiconversions", "APIConversion", ReplicateAll),
		kcp("apis.kcp.io", "apiexportendpointslices", "APIExportEndpointSlice", ReplicateAll),
		kcp("core.kcp.io", "logicalclusters", "LogicalCluster", ReplicateAnnotated),
		kcp("core.kcp.io", "shards", "Shard", ReplicateAll),
		kcp("migration.kcp.io", "logicalclustermigrations", "LogicalClusterMigration", ReplicateAll),
		kcp("cache.kcp.io", "cachedobjects", "CachedObject", ReplicateNone),
		kcp("cache.kcp.io", "cachedresources", "CachedResource", ReplicateAll, KcpV032),
		kcp("cache.kcp.io", "cachedresourceendpointslices", "CachedResourceEndpointSlice", ReplicateAll, KcpV032),
		kcp("cache.kcp.io", "clustercachedresources", "ClusterCachedResource", ReplicateAll, KcpMain),
		kcp("cache.kcp.io", "clustercachedresourceendpointslices", "ClusterCachedResourceEndpointSlice", ReplicateAll, KcpMain),
		kcp("tenancy.kcp.io", "workspacetypes", "WorkspaceType", ReplicateAll),
		rbac("clusterroles", "ClusterRole", false, ReplicateAnnotated),
		rbac("clusterrolebindings", "ClusterRoleBinding", false, ReplicateAnnotated),
		rbac("roles", "Role", true, ReplicateNone),
		rbac("rolebindings", "RoleBinding", true, ReplicateNone),
		admission("mutatingwebhookconfigurations", "MutatingWebhookConfiguration"),
		admission("validatingwebhookconfigurations", "ValidatingWebhookConfiguration"),
		admission("mutatingadmissionpolicies", "MutatingAdmissionPolicy"),
		admission("mutatingadmissionpolicybindings", "MutatingAdmissionPolicyBinding"),
		admission("validatingadmissionpolicies", "ValidatingAdmissionPolicy"),
		admission("validatingadmissionpolicybindings", "ValidatingAdmissionPolicyBinding"),
	}
}

// ServedTypes are the types a cache server serves from the start by default
// (--bootstrap-types=*): the kcp profile (KcpTypes), followed by the
// user-read types (UserReadTypes) the profile lacks, Workspaces and
// APIBindings. Those are pushed only into user-read partitions; no kcp
// release line reads or pushes them, so KcpTypesOf leaves them out and no
// kcp shard waits for an informer on them. A type in both lists is the
// profile's (TestServedTypes checks that both declare it alike).
func ServedTypes() []Type {
	out := KcpTypes()
	have := map[string]bool{}
	for _, t := range out {
		have[t.Name()] = true
	}
	for _, t := range UserReadTypes() {
		if !have[t.Name()] {
			out = append(out, t)
			have[t.Name()] = true
		}
	}
	return out
}

// KcpTypesOf returns the profile's types that shards of release use, in
// profile order, or an error for an unknown release.
func KcpTypesOf(release KcpRelease) ([]Type, error) {
	if !slices.Contains(KcpReleases(), release) {
		return nil, fmt.Errorf("unknown kcp release line %q (known: %s)", release, joinReleases(KcpReleases()))
	}
	var out []Type
	for _, t := range KcpTypes() {
		if t.UsedBy(release) {
			out = append(out, t)
		}
	}
	return out, nil
}

func joinReleases(rs []KcpRelease) string {
	s := make([]string, 0, len(rs))
	for _, r := range rs {
		s = append(s, string(r))
	}
	return strings.Join(s, ", ")
}

// KcpTypesNamed returns the served types (ServedTypes) with the given names
// ("resource.group", as Type.Name), in their order, or an error naming
// every unknown one. "*" alone selects all of them.
func KcpTypesNamed(names []string) ([]Type, error) {
	all := ServedTypes()
	if len(names) == 1 && names[0] == Wildcard {
		return all, nil
	}
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	var out []Type
	for _, t := range all {
		if want[t.Name()] {
			out = append(out, t)
			delete(want, t.Name())
		}
	}
	if len(want) > 0 {
		unknown := make([]string, 0, len(want))
		for n := range want {
			unknown = append(unknown, n)
		}
		slices.Sort(unknown)
		return nil, fmt.Errorf("not a served type: %s (known: %s)", strings.Join(unknown, ", "), strings.Join(TypeNames(all), ", "))
	}
	return out, nil
}

// TypeNames returns the names of types, in order.
func TypeNames(types []Type) []string {
	names := make([]string, 0, len(types))
	for _, t := range types {
		names = append(names, t.Name())
	}
	return names
}
