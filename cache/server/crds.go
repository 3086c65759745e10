package server

import (
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// CRDNames are the names of a schema-less type.
type CRDNames struct {
	Group, Version, Resource, Kind string
	// Namespaced types are scoped to namespaces; the kcp types are not.
	Namespaced bool
}

// DefaultBootstrapCRDs are the types every cache server serves from the
// start: the kcp API types all shards need when another shard is down.
func DefaultBootstrapCRDs() []*apiextensionsv1.CustomResourceDefinition {
	return []*apiextensionsv1.CustomResourceDefinition{
		SchemalessCRD(CRDNames{Group: "apis.kcp.io", Version: "v1alpha1", Resource: "apiexports", Kind: "APIExport"}),
		SchemalessCRD(CRDNames{Group: "apis.kcp.io", Version: "v1alpha1", Resource: "apiresourceschemas", Kind: "APIResourceSchema"}),
		// The cache's own type, not a kcp one: the shards' heartbeats.
		HeartbeatCRD(),
	}
}

// SchemalessCRD returns a CRD that stores any fields as they come: the cache
// holds copies that were validated on their shard, and must not prune or
// reject what a newer shard sends.
func SchemalessCRD(n CRDNames) *apiextensionsv1.CustomResourceDefinition {
	scope := apiextensionsv1.ClusterScoped
	if n.Namespaced {
		scope = apiextensionsv1.NamespaceScoped
	}
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: n.Resource + "." + n.Group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: n.Group,
			Names: apiextensionsv1.CustomResourceDefinitionNames{
				Plural:   n.Resource,
				Singular: lowerKind(n.Kind),
				Kind:     n.Kind,
				ListKind: n.Kind + "List",
			},
			Scope: scope,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name:    n.Version,
				Served:  true,
				Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{
					OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
						Type:                   "object",
						XPreserveUnknownFields: ptr.To(true),
					},
				},
			}},
		},
	}
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
