package cache

import (
	"slices"
	"strings"
	"testing"
)

// The expectations are the table of ../shared/design/kcp-contract.md ("The
// types kcp's cache serves"), written out by hand, with kcp main's renamed
// types (its pkg/cache/server/bootstrap and config/crds).
func TestKcpTypesMatchTheContract(t *testing.T) {
	type want struct {
		kind, storage string
		versions      []string
		namespaced    bool
		pathSegment   bool
		replicate     ReplicatePolicy
		releases      []KcpRelease
	}
	a1 := []string{"v1alpha1"}
	v1 := []string{"v1"}
	wants := map[string]want{
		"apiexports.apis.kcp.io":                                         {"APIExport", "v1alpha2", []string{"v1alpha1", "v1alpha2"}, false, false, ReplicateAll, nil},
		"apiresourceschemas.apis.kcp.io":                                 {"APIResourceSchema", "v1alpha1", a1, false, false, ReplicateAll, nil},
		"apiconversions.apis.kcp.io":                                     {"APIConversion", "v1alpha1", a1, false, false, ReplicateAll, nil},
		"apiexportendpointslices.apis.kcp.io":                            {"APIExportEndpointSlice", "v1alpha1", a1, false, false, ReplicateAll, nil},
		"logicalclusters.core.kcp.io":                                    {"LogicalCluster", "v1alpha1", a1, false, false, ReplicateAnnotated, nil},
		"shards.core.kcp.io":                                             {"Shard", "v1alpha1", a1, false, false, ReplicateAll, nil},
		"logicalclustermigrations.migration.kcp.io":                      {"LogicalClusterMigration", "v1alpha1", a1, false, false, ReplicateAll, nil},
		"cachedobjects.cache.kcp.io":                                     {"CachedObject", "v1alpha1", a1, false, false, ReplicateNone, nil},
		"cachedresources.cache.kcp.io":                                   {"CachedResource", "v1alpha1", a1, false, false, ReplicateAll, []KcpRelease{KcpV032}},
		"cachedresourceendpointslices.cache.kcp.io":                      {"CachedResourceEndpointSlice", "v1alpha1", a1, false, false, ReplicateAll, []KcpRelease{KcpV032}},
		"clustercachedresources.cache.kcp.io":                            {"ClusterCachedResource", "v1alpha1", a1, false, false, ReplicateAll, []KcpRelease{KcpMain}},
		"clustercachedresourceendpointslices.cache.kcp.io":               {"ClusterCachedResourceEndpointSlice", "v1alpha1", a1, false, false, ReplicateAll, []KcpRelease{KcpMain}},
		"workspacetypes.tenancy.kcp.io":                                  {"WorkspaceType", "v1alpha1", a1, false, false, ReplicateAll, nil},
		"clusterroles.rbac.authorization.k8s.io":                         {"ClusterRole", "v1", v1, false, true, ReplicateAnnotated, nil},
		"clusterrolebindings.rbac.authorization.k8s.io":                  {"ClusterRoleBinding", "v1", v1, false, true, ReplicateAnnotated, nil},
		"roles.rbac.authorization.k8s.io":                                {"Role", "v1", v1, true, true, ReplicateNone, nil},
		"rolebindings.rbac.authorization.k8s.io":                         {"RoleBinding", "v1", v1, true, true, ReplicateNone, nil},
		"mutatingwebhookconfigurations.admissionregistration.k8s.io":     {"MutatingWebhookConfiguration", "v1", v1, false, false, ReplicateAll, nil},
		"validatingwebhookconfigurations.admissionregistration.k8s.io":   {"ValidatingWebhookConfiguration", "v1", v1, false, false, ReplicateAll, nil},
		"mutatingadmissionpolicies.admissionregistration.k8s.io":         {"MutatingAdmissionPolicy", "v1", v1, false, false, ReplicateAll, nil},
		"mutatingadmissionpolicybindings.admissionregistration.k8s.io":   {"MutatingAdmissionPolicyBinding", "v1", v1, false, false, ReplicateAll, nil},
		"validatingadmissionpolicies.admissionregistration.k8s.io":       {"ValidatingAdmissionPolicy", "v1", v1, false, false, ReplicateAll, nil},
		"validatingadmissionpolicybindings.admissionregistration.k8s.io": {"ValidatingAdmissionPolicyBinding", "v1", v1, false, false, ReplicateAll, nil},
	}
	types := KcpTypes()
	if len(types) != len(wants) {
		t.Errorf("profile has %d types, the contract %d", len(types), len(wants))
	}
	for _, typ := range types {
		w, ok := wants[typ.Name()]
		if !ok {
			t.Errorf("%s is not in the contract", typ.Name())
			continue
		}
		if typ.Kind != w.kind || typ.StorageVersion != w.storage || !slices.Equal(typ.Versions, w.versions) ||
			typ.Namespaced != w.namespaced || typ.PathSegmentNames != w.pathSegment || typ.Replicate != w.replicate ||
			!slices.Equal(typ.Releases, w.releases) {
			t.Errorf("%s = %+v, want %+v", typ.Name(), typ, w)
		}
		if typ.GVR().Version != w.storage {
			t.Errorf("%s GVR version = %s, want the storage version %s", typ.Name(), typ.GVR().Version, w.storage)
		}
	}
}

// A shard of each line reads and pushes its own line's types: 21 each, as
// kcp's replication controller and its cache informers list them
// (pkg/reconciler/cache/replication, pkg/server of both kcp trees).
func TestKcpTypesOfEachRelease(t *testing.T) {
	for release, want := range map[KcpRelease][2]string{
		KcpV032: {"cachedresources.cache.kcp.io", "clustercachedresources.cache.kcp.io"},
		KcpMain: {"clustercachedresources.cache.kcp.io", "cachedresources.cache.kcp.io"},
	} {
		types, err := KcpTypesOf(release)
		if err != nil {
			t.Fatal(err)
		}
		names := TypeNames(types)
		if len(names) != 21 || !slices.Contains(names, want[0]) || slices.Contains(names, want[1]) {
			t.Errorf("%s: %d types %v; want 21 with %s and without %s", release, len(names), names, want[0], want[1])
		}
	}
	if _, err := KcpTypesOf("v0.31"); err == nil {
		t.Error("an unknown release line was accepted")
	}
}

func TestKcpTypesNamed(t *testing.T) {
	got, err := KcpTypesNamed([]string{"shards.core.kcp.io", "apiexports.apis.kcp.io"})
	if err != nil {
		t.Fatal(err)
	}
	// Profile order, not argument order.
	if names := TypeNames(got); !slices.Equal(names, []string{"apiexports.apis.kcp.io", "shards.core.kcp.io"}) {
		t.Errorf("names = %v", names)
	}
	all, err := KcpTypesNamed([]string{"*"})
	if err != nil || len(all) != len(ServedTypes()) {
		t.Errorf("* selected %d types (%v), want %d", len(all), err, len(ServedTypes()))
	}
	if got, err := KcpTypesNamed([]string{"workspaces.tenancy.kcp.io"}); err != nil || len(got) != 1 {
		t.Errorf("a user-read type is not selectable by name: %v, %v", got, err)
	}
	_, err = KcpTypesNamed([]string{"apiexports.apis.kcp.io", "widgets.example.com", "apiexports"})
	if err == nil || !strings.Contains(err.Error(), "apiexports, widgets.example.com") {
		t.Errorf("unknown names: err = %v, want both named, sorted", err)
	}
}

// Every cache serves the kcp profile and the user-read types, each once; a
// type in both is declared alike (the profile's replicate policy aside),
// so a user-read partition holds it under the versions kcp's shards use.
func TestServedTypes(t *testing.T) {
	served := map[string]Type{}
	for _, typ := range ServedTypes() {
		if _, dup := served[typ.Name()]; dup {
			t.Errorf("%s is served twice", typ.Name())
		}
		served[typ.Name()] = typ
	}
	for _, typ := range KcpTypes() {
		if _, ok := served[typ.Name()]; !ok {
			t.Errorf("kcp type %s is not served", typ.Name())
		}
	}
	for _, typ := range UserReadTypes() {
		got, ok := served[typ.Name()]
		if !ok {
			t.Errorf("user-read type %s is not served", typ.Name())
			continue
		}
		got.Replicate = typ.Replicate
		if got.Kind != typ.Kind || got.StorageVersion != typ.StorageVersion || !slices.Equal(got.Versions, typ.Versions) ||
			got.Namespaced != typ.Namespaced || got.PathSegmentNames != typ.PathSegmentNames {
			t.Errorf("user-read type %s = %+v, served as %+v", typ.Name(), typ, got)
		}
	}
	for _, name := range []string{"workspaces.tenancy.kcp.io", "apibindings.apis.kcp.io"} {
		for _, release := range KcpReleases() {
			types, _ := KcpTypesOf(release)
			if slices.Contains(TypeNames(types), name) {
				t.Errorf("%s is among the types of kcp line %s: its shards would wait for an informer kcp never opens", name, release)
			}
		}
	}
}
