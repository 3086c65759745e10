package dataplane

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/version"
)

// Identity resources: a resource an APIExport exports, or a CachedResource
// publishes, is addressed in the cache as "<resource>:<identityHash>" and
// stored under its own key prefix, so two exports of one resource name never
// mix. These are the few fields of the cached objects that declare them;
// the source keeps only these, never the objects (APIResourceSchemas carry
// whole OpenAPI schemas).

// partitionName names an object in the cache: its partition and its name.
type partitionName struct{ shard, cluster, name string }

// exportRecord is what a cached APIExport contributes: its identity and the
// APIResourceSchemas (in its own partition) of the resources it exports.
type exportRecord struct {
	identity string
	schemas  []string
}

// schemaRecord is the declaration part of a cached APIResourceSchema.
type schemaRecord struct {
	group            string
	plural, singular string
	kind, listKind   string
	namespaced       bool
	versions         []string
}

// cachedResourceRecord is what a cached CachedResource contributes.
type cachedResourceRecord struct {
	identity                 string
	group, version, resource string
	kind                     string
	namespaced               bool
}

// The annotations kcp's CachedResource controller sets with the published
// resource's kind and scope (pkg/reconciler/cache/cachedresources in kcp).
const (
	annotationCachedResourceKind  = "cache.kcp.io/resource-kind"
	annotationCachedResourceScope = "cache.kcp.io/resource-scope"
)

// parseExport reads an APIExport stored under either version: v1alpha2
// lists spec.resources[].schema, v1alpha1 spec.latestResourceSchemas. The
// cache stores objects as sent, so both shapes occur.
func parseExport(body string) (exportRecord, bool) {
	var e struct {
		Spec struct {
			Resources []struct {
				Schema string `json:"schema"`
			} `json:"resources"`
			LatestResourceSchemas []string `json:"latestResourceSchemas"`
		} `json:"spec"`
		Status struct {
			IdentityHash string `json:"identityHash"`
		} `json:"status"`
	}
	if err := json.Unmarshal([]byte("{"+body+"}"), &e); err != nil || e.Status.IdentityHash == "" {
		return exportRecord{}, false
	}
	r := exportRecord{identity: e.Status.IdentityHash}
	for _, res := range e.Spec.Resources {
		if res.Schema != "" {
			r.schemas = append(r.schemas, res.Schema)
		}
	}
	for _, s := range e.Spec.LatestResourceSchemas {
		if s != "" && !slices.Contains(r.schemas, s) {
			r.schemas = append(r.schemas, s)
		}
	}
	return r, true
}

// parseSchema reads an APIResourceSchema's group, names, scope and served
// versions.
func parseSchema(body string) (schemaRecord, bool) {
	var s struct {
		Spec struct {
			Group string `json:"group"`
			Names struct {
				Plural   string `json:"plural"`
				Singular string `json:"singular"`
				Kind     string `json:"kind"`
				ListKind string `json:"listKind"`
			} `json:"names"`
			Scope    string `json:"scope"`
			Versions []struct {
				Name   string `json:"name"`
				Served bool   `json:"served"`
			} `json:"versions"`
		} `json:"spec"`
	}
	if err := json.Unmarshal([]byte("{"+body+"}"), &s); err != nil || s.Spec.Names.Plural == "" || s.Spec.Names.Kind == "" {
		return schemaRecord{}, false
	}
	r := schemaRecord{
		group: s.Spec.Group, plural: s.Spec.Names.Plural, singular: s.Spec.Names.Singular,
		kind: s.Spec.Names.Kind, listKind: s.Spec.Names.ListKind, namespaced: s.Spec.Scope == "Namespaced",
	}
	for _, v := range s.Spec.Versions {
		if v.Served && v.Name != "" {
			r.versions = append(r.versions, v.Name)
		}
	}
	return r, len(r.versions) > 0
}

// parseCachedResource reads a CachedResource that kcp has published: it has
// an identity and the kind and scope annotations.
func parseCachedResource(body string, annotations map[string]string) (cachedResourceRecord, bool) {
	var c struct {
		Spec struct {
			Group    string `json:"group"`
			Version  string `json:"version"`
			Resource string `json:"resource"`
		} `json:"spec"`
		Status struct {
			IdentityHash string `json:"identityHash"`
		} `json:"status"`
	}
	if err := json.Unmarshal([]byte("{"+body+"}"), &c); err != nil {
		return cachedResourceRecord{}, false
	}
	r := cachedResourceRecord{
		identity: c.Status.IdentityHash, group: c.Spec.Group, version: c.Spec.Version, resource: c.Spec.Resource,
		kind: annotations[annotationCachedResourceKind], namespaced: annotations[annotationCachedResourceScope] == "Namespaced",
	}
	ok := r.identity != "" && r.version != "" && r.resource != "" && r.kind != "" && annotations[annotationCachedResourceScope] != ""
	return r, ok
}

// identityResources derives the identity resources the records declare.
// Declarations of one resource (one identity, group and resource) from
// several sources are merged: their versions are united, and the first in a
// stable order decides the rest. Records are visited in key order so the
// result does not depend on map iteration. cached holds the records of
// each type of CachedResource (kcp v0.32's, kcp main's), in that order.
func identityResources(exports map[partitionName]exportRecord, schemas map[partitionName]schemaRecord, cached []map[partitionName]cachedResourceRecord) (map[schema.GroupResource]Resource, []error) {
	out := map[schema.GroupResource]Resource{}
	var conflicts []error
	add := func(r Resource) {
		gr := r.GroupResource()
		old, ok := out[gr]
		if !ok {
			out[gr] = r
			return
		}
		merged := old
		merged.Versions = unionVersions(old.Versions, r.Versions)
		if !old.sameStorage(r) {
			conflicts = append(conflicts, fmt.Errorf("%s is declared twice differently (kind %s/%s, namespaced %t/%t); keeping the first", gr, old.Kind, r.Kind, old.Namespaced, r.Namespaced))
		}
		out[gr] = merged
	}
	for _, k := range sortedKeys(exports) {
		e := exports[k]
		for _, name := range e.schemas {
			s, ok := schemas[partitionName{shard: k.shard, cluster: k.cluster, name: name}]
			if !ok {
				continue // not cached (yet): declared when it arrives
			}
			add(identityResource(s.group, s.plural, e.identity, s.singular, s.kind, s.listKind, s.namespaced, s.versions))
		}
	}
	for _, records := range cached {
		for _, k := range sortedKeys(records) {
			c := records[k]
			add(identityResource(c.group, c.resource, c.identity, "", c.kind, "", c.namespaced, []string{c.version}))
		}
	}
	for gr, r := range out {
		// Oldest first, as CRDs list them.
		slices.SortFunc(r.Versions, version.CompareKubeAwareVersionStrings)
		out[gr] = r
	}
	return out, conflicts
}

func identityResource(group, plural, identity, singular, kind, listKind string, namespaced bool, versions []string) Resource {
	r := plainResource(group, plural, singular, kind, listKind, namespaced, versions)
	r.Resource = plural + ":" + identity
	return r
}

// plainResource declares a resource under its plain name.
func plainResource(group, plural, singular, kind, listKind string, namespaced bool, versions []string) Resource {
	if singular == "" {
		singular = strings.ToLower(kind)
	}
	if listKind == "" {
		listKind = kind + "List"
	}
	return Resource{
		Group: group, Resource: plural,
		Singular: singular, Kind: kind, ListKind: listKind,
		Namespaced: namespaced, Versions: slices.Clone(versions),
		// The origin shard validated the names; the cache must not refuse
		// a copy whose name the origin's rule allowed.
		Names: PathSegmentNames,
	}
}

func sortedKeys[V any](m map[partitionName]V) []partitionName {
	keys := make([]partitionName, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		if a.shard != b.shard {
			return a.shard < b.shard
		}
		if a.cluster != b.cluster {
			return a.cluster < b.cluster
		}
		return a.name < b.name
	})
	return keys
}

// A publication is a resource as cached CachedResources publish it, seen
// without an identity. kcp's cache answers for "<group>/<resource>" without
// an identity (pkg/cache/server/crd_lister.go there): a wildcard read (its
// CachedResource replication opens metadata-only wildcard informers so)
// reads every identity's objects; a read in one logical cluster resolves
// the identity through that cluster's CachedResource.
type publication struct {
	// resource is the plain resource: the kind and scope the first
	// CachedResource (in partition order) declares, every published
	// version.
	resource Resource
	// identities are those of every publishing CachedResource, sorted;
	// byCluster those of the CachedResources in each logical cluster.
	identities []string
	byCluster  map[string][]string
}

func (p publication) equal(o publication) bool {
	return p.resource.equal(o.resource) && slices.Equal(p.identities, o.identities) && maps.EqualFunc(p.byCluster, o.byCluster, slices.Equal)
}

// readOrder returns the identities a read by name in cluster tries, in
// order: those of the cluster's own CachedResources, then every other.
func (p publication) readOrder(cluster string) []string {
	own := p.byCluster[cluster]
	out := slices.Clone(own)
	for _, id := range p.identities {
		if !slices.Contains(own, id) {
			out = append(out, id)
		}
	}
	return out
}

// publications derives the publications of the CachedResource records
// (of each type, in order). Two CachedResources of one resource may
// disagree on its kind or scope; the first in a stable order decides and
// the conflict is reported.
func publications(cached []map[partitionName]cachedResourceRecord) (map[schema.GroupResource]publication, []error) {
	out := map[schema.GroupResource]publication{}
	var conflicts []error
	for _, records := range cached {
		for _, k := range sortedKeys(records) {
			c := records[k]
			r := plainResource(c.group, c.resource, "", c.kind, "", c.namespaced, []string{c.version})
			gr := r.GroupResource()
			p, ok := out[gr]
			if !ok {
				p = publication{resource: r, byCluster: map[string][]string{}}
			} else {
				if !p.resource.sameStorage(r) {
					conflicts = append(conflicts, fmt.Errorf("%s is published differently (kind %s/%s, namespaced %t/%t); keeping the first", gr, p.resource.Kind, r.Kind, p.resource.Namespaced, r.Namespaced))
				}
				p.resource.Versions = unionVersions(p.resource.Versions, r.Versions)
			}
			if !slices.Contains(p.identities, c.identity) {
				p.identities = append(p.identities, c.identity)
			}
			if !slices.Contains(p.byCluster[k.cluster], c.identity) {
				p.byCluster[k.cluster] = append(p.byCluster[k.cluster], c.identity)
			}
			out[gr] = p
		}
	}
	for gr, p := range out {
		slices.SortFunc(p.resource.Versions, version.CompareKubeAwareVersionStrings)
		slices.Sort(p.identities)
		for _, ids := range p.byCluster {
			slices.Sort(ids)
		}
		out[gr] = p
	}
	return out, conflicts
}
