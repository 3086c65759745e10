//go:build kcp

package server

import (
	"context"

	"github.com/kcp-dev/logicalcluster/v3"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionslisters "k8s.io/apiextensions-apiserver/pkg/client/listers/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/kcp"
	"k8s.io/apimachinery/pkg/labels"
)

// systemCRDs is the fork's cluster-aware CRD lister (its CRD handler and
// discovery ask it per logical cluster of the request). The cache keeps its
// CRDs in the system partition and serves them to every partition, as
// upstream apiextensions-apiserver does without clusters: every cluster
// resolves to the same CRDs.
type systemCRDs struct {
	lister apiextensionslisters.CustomResourceDefinitionLister
}

var _ kcp.ClusterAwareCRDClusterLister = systemCRDs{}

func (l systemCRDs) Cluster(logicalcluster.Name) kcp.ClusterAwareCRDLister { return l }

func (l systemCRDs) List(_ context.Context, selector labels.Selector) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	return l.lister.List(selector)
}

func (l systemCRDs) Get(_ context.Context, name string) (*apiextensionsv1.CustomResourceDefinition, error) {
	return l.lister.Get(name)
}

// Refresh returns the lister's current copy of crd.
func (l systemCRDs) Refresh(crd *apiextensionsv1.CustomResourceDefinition) (*apiextensionsv1.CustomResourceDefinition, error) {
	return l.lister.Get(crd.Name)
}

var _ kcp.ClusterAwareCRDLister = systemCRDs{}
