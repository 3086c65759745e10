package dataplane

import (
	"slices"
	"testing"
)

func TestParseExportReadsBothVersions(t *testing.T) {
	for name, tc := range map[string]struct {
		body string
		want []string
		ok   bool
	}{
		"v1alpha2":        {`"spec":{"resources":[{"name":"widgets","group":"example.dev","schema":"v1.widgets.example.dev"}]},"status":{"identityHash":"h"}`, []string{"v1.widgets.example.dev"}, true},
		"v1alpha1":        {`"spec":{"latestResourceSchemas":["v2.widgets.example.dev","v1.gadgets.example.dev"]},"status":{"identityHash":"h"}`, []string{"v2.widgets.example.dev", "v1.gadgets.example.dev"}, true},
		"no identity yet": {`"spec":{"latestResourceSchemas":["v1.widgets.example.dev"]}`, nil, false},
		"not JSON":        {`"spec":`, nil, false},
	} {
		got, ok := parseExport(tc.body)
		if ok != tc.ok || !slices.Equal(got.schemas, tc.want) || (ok && got.identity != "h") {
			t.Errorf("%s: parseExport = %+v, %t; want schemas %v, %t", name, got, ok, tc.want, tc.ok)
		}
	}
}

func TestIdentityResourcesMergeAndSkip(t *testing.T) {
	pn := func(shard, cluster, name string) partitionName { return partitionName{shard, cluster, name} }
	exports := map[partitionName]exportRecord{
		pn("a", "c1", "e1"): {identity: "h1", schemas: []string{"s1", "missing"}},
		// The same identity exported again elsewhere, with a newer version.
		pn("b", "c2", "e2"): {identity: "h1", schemas: []string{"s2"}},
		// A schema in another partition is not this export's.
		pn("a", "c9", "e3"): {identity: "h3", schemas: []string{"s1"}},
	}
	schemas := map[partitionName]schemaRecord{
		pn("a", "c1", "s1"): {group: "example.dev", plural: "widgets", singular: "widget", kind: "Widget", listKind: "WidgetList", namespaced: true, versions: []string{"v1"}},
		pn("b", "c2", "s2"): {group: "example.dev", plural: "widgets", singular: "widget", kind: "Widget", listKind: "WidgetList", namespaced: true, versions: []string{"v2", "v1beta1"}},
	}
	cached := map[partitionName]cachedResourceRecord{
		pn("a", "c1", "cr"): {identity: "h2", group: "", version: "v1", resource: "configmaps", kind: "ConfigMap", namespaced: true},
	}
	got, conflicts := identityResources(exports, schemas, []map[partitionName]cachedResourceRecord{cached})
	if len(conflicts) != 0 {
		t.Errorf("conflicts: %v", conflicts)
	}
	if len(got) != 2 {
		t.Fatalf("got %d resources: %v", len(got), got)
	}
	w := got[Resource{Group: "example.dev", Resource: "widgets:h1"}.GroupResource()]
	if w.Kind != "Widget" || !w.Namespaced || !slices.Equal(w.Versions, []string{"v1beta1", "v1", "v2"}) || w.Names != PathSegmentNames {
		t.Errorf("widgets:h1 = %+v; want Widget, namespaced, v1beta1 v1 v2 (oldest first), path-segment names", w)
	}
	c := got[Resource{Group: "", Resource: "configmaps:h2"}.GroupResource()]
	if c.Kind != "ConfigMap" || c.Singular != "configmap" || c.ListKind != "ConfigMapList" || !slices.Equal(c.Versions, []string{"v1"}) {
		t.Errorf("configmaps:h2 = %+v", c)
	}

	// Two declarations of one identity resource that disagree: the first
	// (in partition order) decides, and the conflict is reported.
	schemas[pn("b", "c2", "s2")] = schemaRecord{group: "example.dev", plural: "widgets", kind: "Widget", namespaced: false, versions: []string{"v2"}}
	got, conflicts = identityResources(exports, schemas, []map[partitionName]cachedResourceRecord{cached})
	if len(conflicts) != 1 || !got[Resource{Group: "example.dev", Resource: "widgets:h1"}.GroupResource()].Namespaced {
		t.Errorf("conflicting scopes: %v, %+v", conflicts, got)
	}
}

func TestParseCachedResourceNeedsKcpsAnnotations(t *testing.T) {
	body := `"spec":{"group":"example.dev","version":"v1","resource":"gadgets"},"status":{"identityHash":"h"}`
	if _, ok := parseCachedResource(body, map[string]string{annotationCachedResourceKind: "Gadget"}); ok {
		t.Error("declared without a scope annotation")
	}
	r, ok := parseCachedResource(body, map[string]string{annotationCachedResourceKind: "Gadget", annotationCachedResourceScope: "Cluster"})
	if !ok || r.kind != "Gadget" || r.namespaced || r.identity != "h" || r.resource != "gadgets" {
		t.Errorf("parseCachedResource = %+v, %t", r, ok)
	}
}

func TestPublicationsUniteIdentitiesByCluster(t *testing.T) {
	pn := func(shard, cluster, name string) partitionName { return partitionName{shard, cluster, name} }
	instances := func(identity, version string) cachedResourceRecord {
		return cachedResourceRecord{identity: identity, group: "machines.svm.io", version: version, resource: "instances", kind: "Instance"}
	}
	// kcp v0.32's CachedResources on one shard, kcp main's
	// ClusterCachedResources on another: two workspaces share identity a,
	// one has b, and one workspace publishes two versions under a and c.
	cached := map[partitionName]cachedResourceRecord{
		pn("alpha", "ws-a1", "instances"): instances("a", "v1alpha1"),
		pn("alpha", "ws-b1", "instances"): instances("b", "v1alpha1"),
	}
	clusterCached := map[partitionName]cachedResourceRecord{
		pn("beta", "ws-a2", "instances"):    instances("a", "v1alpha1"),
		pn("beta", "ws-a2", "instances-v2"): instances("c", "v1beta1"),
	}
	got, conflicts := publications([]map[partitionName]cachedResourceRecord{cached, clusterCached})
	if len(conflicts) != 0 || len(got) != 1 {
		t.Fatalf("publications = %v, conflicts %v; want one, none", got, conflicts)
	}
	p := got[Resource{Group: "machines.svm.io", Resource: "instances"}.GroupResource()]
	if p.resource.Kind != "Instance" || p.resource.ListKind != "InstanceList" || p.resource.Namespaced ||
		!slices.Equal(p.resource.Versions, []string{"v1alpha1", "v1beta1"}) || !slices.Equal(p.identities, []string{"a", "b", "c"}) {
		t.Errorf("publication = %+v; want Instance, cluster-scoped, v1alpha1 v1beta1, identities a b c", p)
	}
	for cluster, want := range map[string][]string{
		"ws-a1": {"a", "b", "c"}, "ws-b1": {"b", "a", "c"}, "ws-a2": {"a", "c", "b"}, "elsewhere": {"a", "b", "c"},
	} {
		if order := p.readOrder(cluster); !slices.Equal(order, want) {
			t.Errorf("read order in %s = %v, want %v (the cluster's own first)", cluster, order, want)
		}
	}

	// A CachedResource that disagrees on the scope: the first decides.
	clusterCached[pn("beta", "ws-x", "instances")] = cachedResourceRecord{identity: "d", group: "machines.svm.io", version: "v1alpha1", resource: "instances", kind: "Instance", namespaced: true}
	got, conflicts = publications([]map[partitionName]cachedResourceRecord{cached, clusterCached})
	if p := got[Resource{Group: "machines.svm.io", Resource: "instances"}.GroupResource()]; len(conflicts) != 1 || p.resource.Namespaced || !slices.Contains(p.identities, "d") {
		t.Errorf("conflicting scope: %v, %+v; want one conflict, cluster-scoped, d among the identities", conflicts, p)
	}
}
