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
	got, conflicts := identityResources(exports, schemas, cached)
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
	got, conflicts = identityResources(exports, schemas, cached)
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
