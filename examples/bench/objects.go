package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

var apiExports = schema.GroupVersionResource{Group: "apis.kcp.io", Version: "v1alpha1", Resource: "apiexports"}

// layout spreads a data set over shards × clusters: object i lives in shard
// i mod shards and cluster (i / shards) mod clusters, so every prefix of the
// data set is spread as evenly as it can be.
type layout struct {
	shards, clusters int
}

func (l layout) shardName(s int) string   { return fmt.Sprintf("shard-%d", s) }
func (l layout) clusterName(c int) string { return fmt.Sprintf("cluster-%02d", c) }

// scopeOf is the partition of object i.
func (l layout) scopeOf(i int) kcpcache.Scope {
	return kcpcache.Scope{Shard: l.shardName(i % l.shards), Cluster: l.clusterName((i / l.shards) % l.clusters)}
}

// partitions are all shard/cluster pairs, in index order of scopeOf.
func (l layout) partitions() []kcpcache.Scope {
	out := make([]kcpcache.Scope, 0, l.shards*l.clusters)
	for i := 0; i < l.shards*l.clusters; i++ {
		out = append(out, l.scopeOf(i))
	}
	return out
}

// countIn returns how many of the first n objects a (possibly wildcard)
// scope holds.
func (l layout) countIn(n int, s kcpcache.Scope) int {
	count := 0
	for i := 0; i < n; i++ {
		o := l.scopeOf(i)
		if (s.Shard == kcpcache.Wildcard || s.Shard == o.Shard) && (s.Cluster == kcpcache.Wildcard || s.Cluster == o.Cluster) {
			count++
		}
	}
	return count
}

func objectName(prefix string, i int) string { return fmt.Sprintf("%s-%05d", prefix, i) }

// etcdKey is where the cache stores an object of the data set:
// <etcd-prefix>/<group>/<resource>/<shard>/<cluster>/<name>.
func etcdKey(etcdPrefix string, s kcpcache.Scope, name string) string {
	return strings.Join([]string{etcdPrefix, apiExports.Group, apiExports.Resource, s.Shard, s.Cluster, name}, "/")
}

// resourceKeyPrefix is the etcd prefix of every apiexport in the cache.
func resourceKeyPrefix(etcdPrefix string) string {
	return typeKeyPrefix(etcdPrefix, apiExports)
}

// typeKeyPrefix is the etcd prefix of every object of gvr in the cache
// (not of another resource whose name starts with gvr's).
func typeKeyPrefix(etcdPrefix string, gvr schema.GroupVersionResource) string {
	return strings.Join([]string{etcdPrefix, gvr.Group, gvr.Resource}, "/") + "/"
}

// apiExportSpec builds an APIExport-like spec whose JSON encoding is exactly
// specBytes long (or as short as the fixed fields allow): schema names,
// an identity secret reference, a permission policy and permission claims,
// padded with a description.
func apiExportSpec(name string, specBytes int) (map[string]interface{}, error) {
	schemas := make([]interface{}, 0, 6)
	for _, r := range []string{"widgets", "gadgets", "gizmos", "sprockets", "cogs", "flanges"} {
		schemas = append(schemas, fmt.Sprintf("v240903-2f3c1a1b.%s.example.dev", r))
	}
	claims := make([]interface{}, 0, 3)
	for i, r := range []string{"configmaps", "secrets", "serviceaccounts"} {
		claims = append(claims, map[string]interface{}{
			"group":        "",
			"resource":     r,
			"identityHash": fmt.Sprintf("%064x", uint64(len(name))*1000003+uint64(i)),
			"all":          true,
		})
	}
	spec := map[string]interface{}{
		"latestResourceSchemas":   schemas,
		"identity":                map[string]interface{}{"secretRef": map[string]interface{}{"namespace": "kcp-system", "name": name + "-identity"}},
		"maximalPermissionPolicy": map[string]interface{}{"local": map[string]interface{}{}},
		"permissionClaims":        claims,
		"description":             "",
	}
	b, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	if pad := specBytes - len(b); pad > 0 {
		spec["description"] = padding(name, pad)
	}
	return spec, nil
}

// padding is n bytes of plain text that JSON does not escape.
func padding(seed string, n int) string {
	const words = "cache shard cluster export schema claim identity policy "
	var b strings.Builder
	b.Grow(n)
	b.WriteString(seed)
	for b.Len() < n {
		b.WriteString(words)
	}
	return b.String()[:n]
}

// apiExport is object i of a data set, for creating in its partition.
func apiExport(name string, specBytes int) (*unstructured.Unstructured, error) {
	spec, err := apiExportSpec(name, specBytes)
	if err != nil {
		return nil, err
	}
	return &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": apiExports.GroupVersion().String(),
		"kind":       "APIExport",
		"metadata":   map[string]interface{}{"name": name},
		"spec":       spec,
	}}, nil
}

// ownedAPIExport is apiExport with the managedFields a kcp shard records for
// such an object, as kcp's replication pushes them with every copy: the user
// who created it owns the spec (kcp's APIExport schema tracks the set
// latestResourceSchemas by value and the map list permissionClaims by group
// and resource), and kcp's controller owns the identity it filled in.
func ownedAPIExport(name string, specBytes int) (*unstructured.Unstructured, error) {
	u, err := apiExport(name, specBytes)
	if err != nil {
		return nil, err
	}
	spec := u.Object["spec"].(map[string]interface{})
	rest := make(map[string]interface{}, len(spec))
	for k, v := range spec {
		if k != "identity" {
			rest[k] = v
		}
	}
	created := time.Date(2026, 11, 2, 9, 30, 0, 0, time.UTC)
	entry := func(manager string, at time.Time, spec map[string]interface{}) (interface{}, error) {
		fields, err := json.Marshal(map[string]interface{}{"f:spec": ownedFields(spec)})
		if err != nil {
			return nil, err
		}
		var v interface{}
		err = json.Unmarshal(fields, &v)
		return map[string]interface{}{
			"manager": manager, "operation": "Update", "apiVersion": apiExports.GroupVersion().String(),
			"time": at.Format(time.RFC3339), "fieldsType": "FieldsV1", "fieldsV1": v,
		}, err
	}
	user, err := entry("kubectl-client-side-apply", created, rest)
	if err != nil {
		return nil, err
	}
	kcp, err := entry("kcp", created.Add(time.Second), map[string]interface{}{"identity": spec["identity"]})
	if err != nil {
		return nil, err
	}
	u.Object["metadata"].(map[string]interface{})["managedFields"] = []interface{}{user, kcp}
	return u, nil
}

// ownedFields is the FieldsV1 set of v as server-side apply records it for
// APIExport's schema: a field per map member ("." for the map itself), a
// value per member of a list of strings (a set), a key per member of a list
// of maps (keyed by group and resource).
func ownedFields(v interface{}) map[string]interface{} {
	out := map[string]interface{}{}
	switch t := v.(type) {
	case map[string]interface{}:
		if len(t) > 0 {
			out["."] = map[string]interface{}{}
		}
		for k, c := range t {
			out["f:"+k] = ownedFields(c)
		}
	case []interface{}:
		for _, item := range t {
			switch it := item.(type) {
			case string:
				b, _ := json.Marshal(it)
				out["v:"+string(b)] = map[string]interface{}{}
			case map[string]interface{}:
				b, _ := json.Marshal(map[string]interface{}{"group": it["group"], "resource": it["resource"]})
				out["k:"+string(b)] = ownedFields(it)
			}
		}
	}
	return out
}

// managedFieldsBytes is the size of an owned export's managedFields as JSON.
func managedFieldsBytes(name string, specBytes int) (int, error) {
	u, err := ownedAPIExport(name, specBytes)
	if err != nil {
		return 0, err
	}
	b, err := json.Marshal(u.Object["metadata"].(map[string]interface{})["managedFields"])
	return len(b), err
}
