package discovery

import (
	"context"
	"sort"

	apiextensionslisters "k8s.io/apiextensions-apiserver/pkg/client/listers/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/version"
	genericdiscovery "k8s.io/apiserver/pkg/endpoints/discovery"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/kcp-cache/kcp-cache/cache/server/dataplane"
)

// GroupLister keeps the unaggregated /apis list in step with the CRDs.
// apiextensions feeds only the aggregated discovery manager and the
// per-group endpoints, because kube-apiserver's aggregator normally serves
// /apis in front of it; without it, clients that do not ask for aggregated
// discovery would not see the cache's types at all.
type GroupLister struct {
	lister  apiextensionslisters.CustomResourceDefinitionLister
	manager genericdiscovery.GroupManager
	// groups are the CRD groups currently listed.
	groups sets.Set[string]
}

// NewGroupLister lists the groups of lister's Established CRDs in manager.
func NewGroupLister(lister apiextensionslisters.CustomResourceDefinitionLister, manager genericdiscovery.GroupManager) *GroupLister {
	return &GroupLister{lister: lister, manager: manager, groups: sets.New[string]()}
}

// sync rebuilds every CRD group's entry from the lister.
func (l *GroupLister) sync(ctx context.Context) {
	crds, err := l.lister.List(labels.Everything())
	if err != nil {
		klog.FromContext(ctx).Error(err, "Listing CRDs for discovery")
		return
	}
	versions := map[string]sets.Set[string]{}
	for _, crd := range crds {
		if !dataplane.IsEstablished(crd) {
			continue
		}
		for _, v := range crd.Spec.Versions {
			if v.Served {
				if versions[crd.Spec.Group] == nil {
					versions[crd.Spec.Group] = sets.New[string]()
				}
				versions[crd.Spec.Group].Insert(v.Name)
			}
		}
	}
	for group, vs := range versions {
		l.manager.AddGroup(apiGroup(group, vs))
	}
	for group := range l.groups {
		if _, ok := versions[group]; !ok {
			l.manager.RemoveGroup(group)
		}
	}
	l.groups = sets.KeySet(versions)
}

// apiGroup lists versions newest first in Kubernetes' version order
// (v2 > v1 > v1beta1 > v1alpha1); the first is preferred.
func apiGroup(group string, versions sets.Set[string]) metav1.APIGroup {
	names := sets.List(versions)
	sort.Slice(names, func(i, j int) bool { return version.CompareKubeAwareVersionStrings(names[i], names[j]) > 0 })
	g := metav1.APIGroup{Name: group}
	for _, v := range names {
		g.Versions = append(g.Versions, metav1.GroupVersionForDiscovery{GroupVersion: group + "/" + v, Version: v})
	}
	g.PreferredVersion = g.Versions[0]
	return g
}

// Start keeps the list current from informer's events: every CRD event
// resyncs, which is cheap for the handful of types a cache serves.
func (l *GroupLister) Start(ctx context.Context, informer cache.SharedIndexInformer) error {
	resync := func(interface{}) { l.sync(ctx) }
	_, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    resync,
		UpdateFunc: func(_, obj interface{}) { resync(obj) },
		DeleteFunc: resync,
	})
	return err
}
