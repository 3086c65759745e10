package cache

import (
	"slices"
	"strings"
	"testing"
)

// The expectations are the table of ../shared/design/kcp-contract.md ("The
// types kcp's cache serves"), written out by hand.
func TestKcpTypesMatchTheContract(t *testing.T) {
	type want struct {
		kind, storage string
		versions      []string
		namespaced    bool
		pathSegment   bool
		replicate     ReplicatePolicy
	}
	a1 := []string{"v1alpha1"}
	v1 := []string{"v1"}
	wants := map[string]want{
		"apiexports.apis.kcp.io":                                         {"APIExport", "v1alpha2", []string{"v1alpha1", "v1alpha2"}, false, false, ReplicateAll},
		"apiresourceschemas.apis.kcp.io":                                 {"APIResourceSchema", "v1alpha1", a1, false, false, ReplicateAll},
		"apiconversions.apis.kcp.io":                                     {"APIConversion", "v1alpha1", a1, false, false, ReplicateAll},
		"apiexportendpointslices.apis.kcp.io":                            {"APIExportEndpointSlice", "v1alpha1", a1, false, false, ReplicateAll},
		"logicalclusters.core.kcp.io":                                    {"LogicalCluster", "v1alpha1", a1, false, false, ReplicateAnnotated},
		"shards.core.kcp.io":                                             {"Shard", "v1alpha1", a1, false, false, ReplicateAll},
		"logicalclustermigrations.migration.kcp.io":                      {"LogicalClusterMigration", "v1alpha1", a1, false, false, ReplicateAll},
		"cachedobjects.cache.kcp.io":                                     {"CachedObject", "v1alpha1", a1, false, false, ReplicateNone},
		"cachedresources.cache.kcp.io":                                   {"CachedResource", "v1alpha1", a1, false, false, ReplicateAll},
		"cachedresourceendpointslices.cache.kcp.io":                      {"CachedResourceEndpointSlice", "v1alpha1", a1, false, false, ReplicateAll},
		"workspacetypes.tenancy.kcp.io":                                  {"WorkspaceType", "v1alpha1", a1, false, false, ReplicateAll},
		"clusterroles.rbac.authorization.k8s.io":                         {"ClusterRole", "v1", v1, false, true, ReplicateAnnotated},
		"clusterrolebindings.rbac.authorization.k8s.io":                  {"ClusterRoleBinding", "v1", v1, false, true, ReplicateAnnotated},
		"roles.rbac.authorization.k8s.io":                                {"Role", "v1", v1, true, true, ReplicateNone},
		"rolebindings.rbac.authorization.k8s.io":                         {"RoleBinding", "v1", v1, true, true, ReplicateNone},
		"mutatingwebhookconfigurations.admissionregistration.k8s.io":     {"MutatingWebhookConfiguration", "v1", v1, false, false, ReplicateAll},
		"validatingwebhookconfigurations.admissionregistration.k8s.io":   {"ValidatingWebhookConfiguration", "v1", v1, false, false, ReplicateAll},
		"mutatingadmissionpolicies.admissionregistration.k8s.io":         {"MutatingAdmissionPolicy", "v1", v1, false, false, ReplicateAll},
		"mutatingadmissionpolicybindings.admissionregistration.k8s.io":   {"MutatingAdmissionPolicyBinding", "v1", v1, false, false, ReplicateAll},
		"validatingadmissionpolicies.admissionregistration.k8s.io":       {"ValidatingAdmissionPolicy", "v1", v1, false, false, ReplicateAll},
		"validatingadmissionpolicybindings.admissionregistration.k8s.io": {"ValidatingAdmissionPolicyBinding", "v1", v1, false, false, ReplicateAll},
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
			typ.Namespaced != w.namespaced || typ.PathSegmentNames != w.pathSegment || typ.Replicate != w.replicate {
			t.Errorf("%s = %+v, want %+v", typ.Name(), typ, w)
		}
		if typ.GVR().Version != w.storage {
			t.Errorf("%s GVR version = %s, want the storage version %s", typ.Name(), typ.GVR().Version, w.storage)
		}
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
	if err != nil || len(all) != len(KcpTypes()) {
		t.Errorf("* selected %d types (%v), want %d", len(all), err, len(KcpTypes()))
	}
	_, err = KcpTypesNamed([]string{"apiexports.apis.kcp.io", "widgets.example.com", "apiexports"})
	if err == nil || !strings.Contains(err.Error(), "apiexports, widgets.example.com") {
		t.Errorf("unknown names: err = %v, want both named, sorted", err)
	}
}
