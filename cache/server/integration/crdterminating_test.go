package integration_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kcp-cache/kcp-cache/cache/server/bootstrap"
	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
)

// A CRD whose objects appear after its deletion was accepted (a shard's
// create racing the in-use check) still goes away: upstream's finalizer
// cannot delete them (it names no partition), so the server purges them
// through their partitions. Simulated deterministically: a finalizer of the
// test's holds the CRD in Terminating while an object is written straight
// into its partition's key in etcd.
func TestCRDWithLateObjectsIsNotTerminatingForever(t *testing.T) {
	t.Parallel()
	srv := cachetest.StartServer(t)
	ctx := testContext(t)
	crds, err := apiextensionsclient.NewForConfig(srv.Config())
	if err != nil {
		t.Fatal(err)
	}
	crd := deleteHeldCRD(ctx, t, crds, bootstrap.CRDNames{Group: "late.dev", Version: "v1", Resource: "gadgets", Kind: "Gadget"})
	key := srv.EtcdPrefix() + "/late.dev/gadgets/amber/root/g1"
	value := `{"apiVersion":"late.dev/v1","kind":"Gadget","metadata":{"name":"g1","uid":"6a0e1c43-0000-4000-8000-000000000001","creationTimestamp":"2026-01-01T00:00:00Z","annotations":{"kcp.io/shard":"amber","kcp.io/cluster":"root"}}}`
	if _, err := srv.EtcdClient().Put(ctx, key, value); err != nil {
		t.Fatal(err)
	}
	releaseHold(ctx, t, crds, crd.Name)
	cachetest.Eventually(t, "the CRD is gone", func(ctx context.Context) error {
		got, err := crds.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crd.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		return fmt.Errorf("CRD still Terminating: finalizers %v, conditions %+v", got.Finalizers, got.Status.Conditions)
	})
	if keys := srv.EtcdKeys(t, "/late.dev/"); len(keys) != 0 {
		t.Errorf("objects of the deleted CRD remain in etcd: %v", keys)
	}
}

// An object that appears while its CRD is Terminating, after every event
// of the CRD, is still purged: upstream's finalizer is done with its own
// part by then (or only polls, without changing the CRD), so the purger
// looks again on its own for as long as the CRD is Terminating. The test's
// finalizer holds the CRD meanwhile; the object is written straight into
// its partition's key once upstream's finalizer has gone.
func TestObjectArrivingAtATerminatingCRDIsPurged(t *testing.T) {
	t.Parallel()
	srv := cachetest.StartServer(t)
	ctx := testContext(t)
	crds, err := apiextensionsclient.NewForConfig(srv.Config())
	if err != nil {
		t.Fatal(err)
	}
	crd := deleteHeldCRD(ctx, t, crds, bootstrap.CRDNames{Group: "later.dev", Version: "v1", Resource: "widgets", Kind: "Widget"})
	cachetest.Eventually(t, "upstream's finalizer is done, the test's holds the CRD", func(ctx context.Context) error {
		got, err := crds.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crd.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if fmt.Sprint(got.Finalizers) != "[test.kcp-cache.dev/hold]" {
			return fmt.Errorf("finalizers %v", got.Finalizers)
		}
		return nil
	})
	// Every event of the CRD has passed: it has not changed for 3 s.
	lastRV, changed := "", time.Now()
	cachetest.Eventually(t, "the Terminating CRD stays as it is", func(ctx context.Context) error {
		got, err := crds.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crd.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if got.ResourceVersion != lastRV {
			lastRV, changed = got.ResourceVersion, time.Now()
		}
		if quiet := time.Since(changed); quiet < 3*time.Second {
			return fmt.Errorf("changed %s ago", quiet.Round(time.Millisecond))
		}
		return nil
	})
	key := srv.EtcdPrefix() + "/later.dev/widgets/amber/root/w1"
	value := `{"apiVersion":"later.dev/v1","kind":"Widget","metadata":{"name":"w1","uid":"6a0e1c43-0000-4000-8000-000000000002","creationTimestamp":"2026-01-01T00:00:00Z","annotations":{"kcp.io/shard":"amber","kcp.io/cluster":"root"}}}`
	if _, err := srv.EtcdClient().Put(ctx, key, value); err != nil {
		t.Fatal(err)
	}
	cachetest.Eventually(t, "the late object is purged while the CRD is Terminating", func(context.Context) error {
		if keys := srv.EtcdKeys(t, "/later.dev/"); len(keys) != 0 {
			return fmt.Errorf("objects of the Terminating CRD in etcd: %v", keys)
		}
		return nil
	})
	releaseHold(ctx, t, crds, crd.Name)
	cachetest.Eventually(t, "the CRD is gone", func(ctx context.Context) error {
		_, err := crds.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crd.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there: %v", err)
	})
}

// deleteHeldCRD creates a CRD with the test's finalizer, waits until it is
// established and deletes it: it stays Terminating until releaseHold.
func deleteHeldCRD(ctx context.Context, t *testing.T, crds apiextensionsclient.Interface, names bootstrap.CRDNames) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	crd := bootstrap.SchemalessCRD(names)
	crd.Finalizers = []string{"test.kcp-cache.dev/hold"}
	if _, err := crds.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cachetest.Eventually(t, "the CRD is established", func(ctx context.Context) error {
		got, err := crds.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crd.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, c := range got.Status.Conditions {
			if c.Type == "Established" && c.Status == "True" {
				return nil
			}
		}
		return fmt.Errorf("not established")
	})
	if err := crds.ApiextensionsV1().CustomResourceDefinitions().Delete(ctx, crd.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting an unused CRD: %v", err)
	}
	return crd
}

// releaseHold removes the test's finalizer from the CRD name.
func releaseHold(ctx context.Context, t *testing.T, crds apiextensionsclient.Interface, name string) {
	t.Helper()
	if _, err := crds.ApiextensionsV1().CustomResourceDefinitions().Patch(ctx, name, types.JSONPatchType,
		[]byte(`[{"op":"remove","path":"/metadata/finalizers/0"}]`), metav1.PatchOptions{}); err != nil {
		t.Fatalf("releasing the test's finalizer: %v", err)
	}
}
