//go:build !kcp

package discovery

import (
	"context"

	apiextensionslisters "k8s.io/apiextensions-apiserver/pkg/client/listers/apiextensions/v1"
	"k8s.io/apiserver/pkg/endpoints/discovery/aggregated"
	"k8s.io/client-go/tools/cache"
)

// StartAggregated does nothing in the upstream build: upstream
// apiextensions-apiserver's discovery controller feeds the aggregated
// discovery manager. aggregated_kcp.go is kcp's fork's build, which has none.
func StartAggregated(context.Context, apiextensionslisters.CustomResourceDefinitionLister, cache.SharedIndexInformer, aggregated.ResourceManager) error {
	return nil
}
