package bootstrap

import (
	"k8s.io/apiextensions-apiserver/pkg/apihelpers"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/server/dataplane"
)

// apiApprovalAnnotation is required by apiextensions on CRDs in groups
// ending in k8s.io or kubernetes.io. kcp declares RBAC and admission types
// as CRDs under the reference its fork's API review gave; the cache declares
// the same types with the same reference.
const (
	apiApprovalAnnotation = "api-approved.kubernetes.io"
	kcpAPIApproval        = "https://github.com/kcp-dev/kubernetes/pull/4"
)

// CRDNames are the names of a schema-less type with one version.
type CRDNames struct {
	Group, Version, Resource, Kind string
	// Namespaced types are scoped to namespaces; the kcp types are not.
	Namespaced bool
}

// DefaultCRDs are the types every cache server serves from the
// start: the whole kcp type profile and the user-read types,
// kcpcache.ServedTypes.
func DefaultCRDs() []*apiextensionsv1.CustomResourceDefinition {
	return CRDs(kcpcache.ServedTypes())
}

// CRDs returns the CRDs of types and of the cache's own type, the
// shards' heartbeats, which is served whatever part of the kcp profile is.
func CRDs(types []kcpcache.Type) []*apiextensionsv1.CustomResourceDefinition {
	return append(TypeCRDs(types), HeartbeatCRD())
}

// TypeCRDs returns the CRDs declaring types, in order.
func TypeCRDs(types []kcpcache.Type) []*apiextensionsv1.CustomResourceDefinition {
	crds := make([]*apiextensionsv1.CustomResourceDefinition, 0, len(types))
	for _, t := range types {
		crds = append(crds, TypeCRD(t))
	}
	return crds
}

// SchemalessCRD returns a CRD declaring one version of a schema-less type.
func SchemalessCRD(n CRDNames) *apiextensionsv1.CustomResourceDefinition {
	return TypeCRD(kcpcache.Type{
		Group: n.Group, Resource: n.Resource, Kind: n.Kind,
		Versions: []string{n.Version}, StorageVersion: n.Version, Namespaced: n.Namespaced,
	})
}

// TypeCRD returns a CRD that declares t schema-less: every version stores
// any fields as they come. The cache holds copies that were validated on
// their shard, and must not prune or reject what a newer shard sends.
func TypeCRD(t kcpcache.Type) *apiextensionsv1.CustomResourceDefinition {
	scope := apiextensionsv1.ClusterScoped
	if t.Namespaced {
		scope = apiextensionsv1.NamespaceScoped
	}
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: t.Name()},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: t.Group,
			Names: apiextensionsv1.CustomResourceDefinitionNames{
				Plural:   t.Resource,
				Singular: lowerKind(t.Kind),
				Kind:     t.Kind,
				ListKind: t.Kind + "List",
			},
			Scope: scope,
		},
	}
	for _, v := range t.Versions {
		crd.Spec.Versions = append(crd.Spec.Versions, apiextensionsv1.CustomResourceDefinitionVersion{
			Name:    v,
			Served:  true,
			Storage: v == t.StorageVersion,
			Schema: &apiextensionsv1.CustomResourceValidation{
				OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type:                   "object",
					XPreserveUnknownFields: ptr.To(true),
				},
			},
		})
	}
	annotations := map[string]string{}
	if t.PathSegmentNames {
		annotations[dataplane.ValidateNameAnnotation] = string(dataplane.PathSegmentNames)
	}
	if apihelpers.IsProtectedCommunityGroup(t.Group) {
		annotations[apiApprovalAnnotation] = kcpAPIApproval
	}
	if len(annotations) > 0 {
		crd.Annotations = annotations
	}
	return crd
}

func lowerKind(kind string) string {
	b := []byte(kind)
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + ('a' - 'A')
		}
	}
	return string(b)
}
