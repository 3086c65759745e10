package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/kcp-cache/kcp-cache/cache/server/dataplane"
)

const bootstrapRetryInterval = 200 * time.Millisecond

// Installer creates or updates the bootstrapped CRDs, so that discovery,
// OpenAPI and the CRD API describe the types the data plane serves from the
// start. A declaration that can never be applied (it drops a version objects
// were stored as) is a conflict: reported by the types readiness check, the
// server stays unready, and nothing is changed.
type Installer struct {
	crds []*apiextensionsv1.CustomResourceDefinition

	mu        sync.Mutex
	conflicts []error
}

// NewInstaller installs crds; Run does it.
func NewInstaller(crds []*apiextensionsv1.CustomResourceDefinition) *Installer {
	return &Installer{crds: crds}
}

// Run retries until every CRD is Established or in conflict, or ctx ends: a
// post-start hook that returns an error stops the process, and a cache
// server whose etcd is briefly unreachable should wait, not die. All CRDs
// progress together, so that start-up takes about as long for twenty types
// as for one.
func (b *Installer) Run(ctx context.Context, loopback *rest.Config) error {
	logger := klog.FromContext(ctx).WithName("bootstrap")
	crdClient, err := apiextensionsclient.NewForConfig(loopback)
	if err != nil {
		return err
	}
	pending := append([]*apiextensionsv1.CustomResourceDefinition(nil), b.crds...)
	err = wait.PollUntilContextCancel(ctx, bootstrapRetryInterval, true, func(ctx context.Context) (bool, error) {
		var still []*apiextensionsv1.CustomResourceDefinition
		for _, crd := range pending {
			done, err := ensureCRD(ctx, crdClient, crd)
			var conflict *declarationConflict
			switch {
			case errors.As(err, &conflict):
				logger.Error(err, "Bootstrapped type cannot be declared; the server stays unready", "crd", crd.Name)
				b.mu.Lock()
				b.conflicts = append(b.conflicts, err)
				b.mu.Unlock()
			case err != nil:
				logger.Info("Bootstrapping CRD, will retry", "crd", crd.Name, "err", err)
				still = append(still, crd)
			case !done:
				still = append(still, crd)
			default:
				logger.V(2).Info("CRD is Established", "crd", crd.Name)
			}
		}
		pending = still
		return len(pending) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("bootstrapping CRDs: %w", err)
	}
	return nil
}

// check fails while a declaration is in conflict with what is stored.
func (b *Installer) Check() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return errors.Join(b.conflicts...)
}

// declarationConflict is a bootstrapped declaration that removes a version
// objects were stored as. Kubernetes records those in the CRD's
// status.storedVersions and refuses to drop them; kcp's rule is the same: a
// version that was ever a storage version is never removed.
type declarationConflict struct {
	crd     string
	removed []string
}

func (c *declarationConflict) Error() string {
	return fmt.Sprintf("the declaration of %s removes version(s) %s, which objects were stored as (status.storedVersions); keep them in the declaration, served or not", c.crd, strings.Join(c.removed, ", "))
}

// removedStoredVersions returns the versions in existing's storedVersions
// that want does not declare.
func removedStoredVersions(existing, want *apiextensionsv1.CustomResourceDefinition) []string {
	declared := sets.New[string]()
	for _, v := range want.Spec.Versions {
		declared.Insert(v.Name)
	}
	var removed []string
	for _, v := range existing.Status.StoredVersions {
		if !declared.Has(v) {
			removed = append(removed, v)
		}
	}
	return removed
}

// ensureCRD makes one step towards crd being Established; true when it is.
func ensureCRD(ctx context.Context, client apiextensionsclient.Interface, want *apiextensionsv1.CustomResourceDefinition) (bool, error) {
	crds := client.ApiextensionsV1().CustomResourceDefinitions()
	got, err := crds.Get(ctx, want.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err := crds.Create(ctx, want, metav1.CreateOptions{})
		return false, err
	case err != nil:
		return false, err
	case len(removedStoredVersions(got, want)) > 0:
		return false, &declarationConflict{crd: want.Name, removed: removedStoredVersions(got, want)}
	case !equality.Semantic.DeepEqual(got.Spec.Names, want.Spec.Names) || !equality.Semantic.DeepEqual(got.Spec.Versions, want.Spec.Versions) || got.Spec.Scope != want.Spec.Scope:
		updated := got.DeepCopy()
		updated.Spec.Names, updated.Spec.Versions, updated.Spec.Scope = want.Spec.Names, want.Spec.Versions, want.Spec.Scope
		_, err := crds.Update(ctx, updated, metav1.UpdateOptions{})
		return false, err
	case !dataplane.IsEstablished(got):
		// Discovery and OpenAPI list only Established CRDs.
		return false, nil
	}
	// Established is enough: whether the type's watch cache serves (the
	// first lists of a type answer 429 while it fills) is the types
	// readiness check's to say, on every /readyz. Waiting for it here too
	// kept /readyz unready for up to a retry interval after the last cache
	// filled.
	return true, nil
}
