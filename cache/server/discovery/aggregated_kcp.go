//go:build kcp

package discovery

import (
	"context"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionslisters "k8s.io/apiextensions-apiserver/pkg/client/listers/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/endpoints/discovery/aggregated"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/kcp-cache/kcp-cache/cache/server/dataplane"
)

// The kcp build (kcp's Kubernetes fork): the fork's apiextensions-apiserver
// has no discovery controller (kcp serves discovery per logical cluster
// from its CRD lister), so nothing puts the CRDs' groups into the
// aggregated discovery manager, and clients asking for aggregated discovery
// (client-go does by default) would not see the cache's types.
// aggregated_upstream.go is the upstream build, where apiextensions does it.

// StartAggregated keeps manager's aggregated discovery in step with the
// Established CRDs of lister: every CRD event rebuilds every CRD group
// version, as GroupLister does for the unaggregated list.
func StartAggregated(ctx context.Context, lister apiextensionslisters.CustomResourceDefinitionLister, informer cache.SharedIndexInformer, manager aggregated.ResourceManager) error {
	if manager == nil {
		return nil
	}
	a := &aggregatedLister{lister: lister, manager: manager.WithSource(aggregated.CRDSource), versions: sets.New[metav1.GroupVersion]()}
	resync := func(interface{}) { a.sync(ctx) }
	_, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    resync,
		UpdateFunc: func(_, obj interface{}) { resync(obj) },
		DeleteFunc: resync,
	})
	return err
}

type aggregatedLister struct {
	lister  apiextensionslisters.CustomResourceDefinitionLister
	manager aggregated.ResourceManager
	// versions are the CRD group versions currently listed.
	versions sets.Set[metav1.GroupVersion]
}

func (a *aggregatedLister) sync(ctx context.Context) {
	crds, err := a.lister.List(labels.Everything())
	if err != nil {
		klog.FromContext(ctx).Error(err, "Listing CRDs for aggregated discovery")
		return
	}
	resources := map[metav1.GroupVersion][]apidiscoveryv2.APIResourceDiscovery{}
	for _, crd := range crds {
		if !dataplane.IsEstablished(crd) {
			continue
		}
		for _, v := range crd.Spec.Versions {
			if v.Served {
				gv := metav1.GroupVersion{Group: crd.Spec.Group, Version: v.Name}
				resources[gv] = append(resources[gv], resourceDiscovery(crd, v))
			}
		}
	}
	for gv, rs := range resources {
		a.manager.AddGroupVersion(gv.Group, apidiscoveryv2.APIVersionDiscovery{
			Version:   gv.Version,
			Resources: rs,
			Freshness: apidiscoveryv2.DiscoveryFreshnessCurrent,
		})
		// The priorities upstream's discovery controller gives CRDs: the
		// manager then orders a group's versions by Kubernetes' version
		// order.
		a.manager.SetGroupVersionPriority(gv, 1000, 100)
	}
	for gv := range a.versions {
		if _, ok := resources[gv]; !ok {
			a.manager.RemoveGroupVersion(gv)
		}
	}
	a.versions = sets.KeySet(resources)
}

// resourceDiscovery is the aggregated discovery entry of one served version
// of crd, with the verbs and subresources the cache serves for it.
func resourceDiscovery(crd *apiextensionsv1.CustomResourceDefinition, v apiextensionsv1.CustomResourceDefinitionVersion) apidiscoveryv2.APIResourceDiscovery {
	scope := apidiscoveryv2.ScopeCluster
	if crd.Spec.Scope == apiextensionsv1.NamespaceScoped {
		scope = apidiscoveryv2.ScopeNamespace
	}
	names := crd.Status.AcceptedNames
	gvk := func(kind string) *metav1.GroupVersionKind {
		return &metav1.GroupVersionKind{Group: crd.Spec.Group, Version: v.Name, Kind: kind}
	}
	r := apidiscoveryv2.APIResourceDiscovery{
		Resource:         names.Plural,
		SingularResource: names.Singular,
		Scope:            scope,
		ResponseKind:     gvk(names.Kind),
		Verbs:            []string{"delete", "deletecollection", "get", "list", "patch", "create", "update", "watch"},
		ShortNames:       names.ShortNames,
		Categories:       names.Categories,
	}
	if v.Subresources != nil && v.Subresources.Status != nil {
		r.Subresources = append(r.Subresources, apidiscoveryv2.APISubresourceDiscovery{Subresource: "status", ResponseKind: gvk(names.Kind), Verbs: []string{"get", "patch", "update"}})
	}
	if v.Subresources != nil && v.Subresources.Scale != nil {
		r.Subresources = append(r.Subresources, apidiscoveryv2.APISubresourceDiscovery{Subresource: "scale", ResponseKind: &metav1.GroupVersionKind{Group: "autoscaling", Version: "v1", Kind: "Scale"}, Verbs: []string{"get", "patch", "update"}})
	}
	return r
}
