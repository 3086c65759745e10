package integration_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
)

// TestRegionsPublishedResourceReadWithoutIdentityAtAMirror: a shard homed
// at west publishes instances through a CachedResource; at east, which
// mirrors it, a consistent read of them without identity (as kcp's
// TestReplicationWithWildcardListing reads them by name in the shard's
// partition) is confirmed with west through the identity's type, answers
// every write west acknowledged before it, and a stale read says how old
// the copy is.
func TestRegionsPublishedResourceReadWithoutIdentityAtAMirror(t *testing.T) {
	if testing.Short() {
		t.Skip("long scenario (several caches in regions): skipped with -short")
	}
	ctx := testContext(t)
	regions := startRegions(t, ctx, "east", "west")
	east, west := regions["east"], regions["west"]

	if _, err := dyn(t, west.srv, "s-west", "ws-1").Resource(cachedResourcesGVR).Create(ctx, cachedResource(cachedResourcesGVR, "CachedResource", "instances", "ida"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pushInstance(t, west.srv, "s-west", "ws-1", "ida", instance("web-1", "1"))

	// The identity's type is new at east: once east serves it, the first
	// consistent read (one request, not retried) is confirmed, without
	// waiting for the mirror's next look for new types (every 10 s).
	byIdentity := dyn(t, east.srv, "s-west", "ws-1").Resource(instancesOf("ida"))
	cachetest.Eventually(t, "east serves the identity's type", func(ctx context.Context) error {
		_, err := byIdentity.Get(ctx, "web-1", metav1.GetOptions{ResourceVersion: "0"})
		var status apierrors.APIStatus
		if errors.As(err, &status) && apierrors.IsNotFound(err) && status.Status().Details != nil && status.Status().Details.Name == "web-1" {
			return nil // served; the object is not there yet
		}
		return err
	})
	if got, err := byIdentity.Get(ctx, "web-1", metav1.GetOptions{}); err != nil {
		t.Fatalf("the first consistent read of a type new at east: %v", err)
	} else if v, _, _ := unstructured.NestedString(got.Object, "spec", "v"); v != "1" {
		t.Fatalf("the first consistent read of a type new at east: v=%q, want 1", v)
	}

	atEast := dyn(t, east.srv, "s-west", "ws-1").Resource(instancesGVR)
	cachetest.Eventually(t, "east answers a consistent read of s-west's instance without identity", func(ctx context.Context) error {
		got, err := atEast.Get(ctx, "web-1", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if v, _, _ := unstructured.NestedString(got.Object, "spec", "v"); v != "1" {
			return fmt.Errorf("web-1 has v=%q, want 1", v)
		}
		return nil
	})

	// Every write the home acknowledged is in the next consistent answer.
	atWest := dyn(t, west.srv, "s-west", "ws-1").Resource(instancesOf("ida"))
	for _, v := range []string{"2", "3"} {
		cur, err := atWest.Get(ctx, "web-1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := unstructured.SetNestedField(cur.Object, v, "spec", "v"); err != nil {
			t.Fatal(err)
		}
		if _, err := atWest.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		got, err := atEast.Get(ctx, "web-1", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("consistent read at east after west acknowledged v=%s: %v", v, err)
		}
		if gotV, _, _ := unstructured.NestedString(got.Object, "spec", "v"); gotV != v {
			t.Fatalf("east answered v=%q after west acknowledged v=%s", gotV, v)
		}
	}

	code, header := east.get(ctx, t, kcpcache.ScopedPathPrefix(kcpcache.Scope{Shard: "s-west", Cluster: "ws-1"})+"/apis/machines.svm.io/v1alpha1/instances?resourceVersion=0")
	if code != 200 || header.Get(kcpcache.FreshnessAgeHeader) == "" {
		t.Fatalf("stale read at east: %d, %s %q; want 200 with the age of west's copy", code, kcpcache.FreshnessAgeHeader, header.Get(kcpcache.FreshnessAgeHeader))
	}
}
