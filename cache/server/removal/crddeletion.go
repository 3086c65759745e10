package removal

import (
	"context"
	"fmt"

	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/client"
	"github.com/kcp-cache/kcp-cache/cache/server/authorization"
)

// CRDDeletion says whether a CRD may be deleted; the request guard asks it
// before a CRD deletion reaches upstream. A bootstrapped CRD may never be
// deleted, nor one whose objects are still stored: upstream's CRD finalizer
// deletes instances without a request scope, which cannot address a
// partition, so the CRD would hang in Terminating. (Objects a shard creates
// after the check are the CRDPurger's.)
type CRDDeletion struct {
	// Bootstrapped names the CRDs that are never deleted.
	Bootstrapped sets.Set[string]
	// InUse reports whether any partition holds objects of the CRD named
	// name.
	InUse func(ctx context.Context, name string) (bool, error)
}

// NewCRDDeletion checks deletions of CRDs, looking for their objects
// through the server's loopback client (system:masters).
func NewCRDDeletion(bootstrapped sets.Set[string], loopback *rest.Config) CRDDeletion {
	return CRDDeletion{Bootstrapped: bootstrapped, InUse: crdInUse(loopback)}
}

// Check returns the error a request with verb (delete or deletecollection)
// for the CRD name is refused with, or nil if it may proceed.
func (d CRDDeletion) Check(ctx context.Context, verb, name string) error {
	crds := authorization.CRDResource
	if verb == "deletecollection" {
		return apierrors.NewMethodNotSupported(crds, "deletecollection (delete CRDs one by one)")
	}
	if d.Bootstrapped.Has(name) {
		return apierrors.NewForbidden(crds, name, fmt.Errorf("it is bootstrapped by the cache server"))
	}
	if d.InUse == nil {
		return nil
	}
	inUse, err := d.InUse(ctx, name)
	if err != nil {
		return apierrors.NewInternalError(fmt.Errorf("checking whether %s still has objects: %w", name, err))
	}
	if inUse {
		return apierrors.NewConflict(crds, name, fmt.Errorf("objects of this type are still stored in the cache; delete them in every partition first"))
	}
	return nil
}

// crdInUse answers whether any partition holds objects of a CRD, by listing
// one object through the "*/*" scope over the loopback client.
func crdInUse(loopback *rest.Config) func(ctx context.Context, name string) (bool, error) {
	return func(ctx context.Context, name string) (bool, error) {
		crdClient, err := apiextensionsclient.NewForConfig(loopback)
		if err != nil {
			return false, err
		}
		crd, err := crdClient.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		everywhere, err := client.ScopedConfig(loopback, kcpcache.Wildcard, kcpcache.Wildcard)
		if err != nil {
			return false, err
		}
		dyn, err := dynamic.NewForConfig(everywhere)
		if err != nil {
			return false, err
		}
		for _, v := range crd.Spec.Versions {
			if !v.Served {
				continue
			}
			gvr := schema.GroupVersionResource{Group: crd.Spec.Group, Version: v.Name, Resource: crd.Spec.Names.Plural}
			list, err := dyn.Resource(gvr).List(ctx, metav1.ListOptions{Limit: 1})
			if err != nil {
				return false, err
			}
			return len(list.Items) > 0, nil
		}
		return false, nil
	}
}
