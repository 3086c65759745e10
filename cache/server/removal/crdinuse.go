package removal

import (
	"context"

	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/client"
)

// NewCRDInUseChecker answers whether any partition holds objects of a CRD,
// by listing one object through the "*/*" scope over the loopback client.
func NewCRDInUseChecker(loopback *rest.Config) func(ctx context.Context, name string) (bool, error) {
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
