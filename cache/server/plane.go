package server

import (
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kcp-cache/kcp-cache/cache/server/dataplane"
)

// TypesReadyCheckName is the readyz check that passes once every
// bootstrapped type's storage serves from a warm watch cache, and fails for
// as long as a bootstrapped declaration conflicts with stored data.
const TypesReadyCheckName = "kcp-cache-types"

// exportedTypes names the bootstrapped types whose objects declare identity
// resources; a type that is not bootstrapped is not followed.
func exportedTypes(crds []*apiextensionsv1.CustomResourceDefinition) dataplane.ExportedTypes {
	var types dataplane.ExportedTypes
	for _, crd := range crds {
		gr := dataplane.ResourceFromCRD(crd).GroupResource()
		switch gr {
		case schema.GroupResource{Group: "apis.kcp.io", Resource: "apiexports"}:
			types.APIExports = gr
		case schema.GroupResource{Group: "apis.kcp.io", Resource: "apiresourceschemas"}:
			types.APIResourceSchemas = gr
		case schema.GroupResource{Group: "cache.kcp.io", Resource: "cachedresources"}:
			types.CachedResources = gr
		case schema.GroupResource{Group: "cache.kcp.io", Resource: "clustercachedresources"}:
			types.ClusterCachedResources = gr
		}
	}
	return types
}
