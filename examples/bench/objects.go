package main

import (
	"encoding/json"
	"fmt"
	"strings"

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
	return strings.Join([]string{etcdPrefix, apiExports.Group, apiExports.Resource}, "/") + "/"
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
