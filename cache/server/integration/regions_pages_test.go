package integration_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

// TestRegionsMirrorCopiesALargeHomeInPages: a home holds more objects of a
// type than one page of a mirror's lists (500): the mirror's first copy
// reads every page; stopped while the home deletes some, the mirror's next
// list (its own copies read in pages too) deletes exactly those.
func TestRegionsMirrorCopiesALargeHomeInPages(t *testing.T) {
	if testing.Short() {
		t.Skip("long scenario (several caches in regions): skipped with -short")
	}
	ctx := testContext(t)
	regions := startRegions(t, ctx, "a", "b")
	a, b := regions["a"], regions["b"]
	const n, deleted = 1234, 100
	atA := a.shard(t, "s-a")
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				if _, err := atA.Create(ctx, apiExport(fmt.Sprintf("obj-%04d", i), nil), metav1.CreateOptions{}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	// The home pages a list of the wildcard, so the mirror's lists come in
	// several pages.
	page, err := dyn(t, a.srv, kcpcache.Wildcard, kcpcache.Wildcard).Resource(apiExports).List(ctx, metav1.ListOptions{Limit: 500})
	if err != nil || len(page.Items) != 500 || page.GetContinue() == "" {
		t.Fatalf("a list of 500 at the home: %d items, continue %q, %v; want a first page", len(page.Items), page.GetContinue(), err)
	}
	waitItems(t, b, "s-a", n, "a")

	b.stop(t)
	for i := range deleted {
		if err := atA.Delete(ctx, fmt.Sprintf("obj-%04d", i), metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	b.start(t, ctx)
	waitItems(t, b, "s-a", n-deleted, "a")
	for _, i := range []int{0, deleted - 1} {
		if _, err := dyn(t, b.srv, "s-a", "root").Resource(apiExports).Get(ctx, fmt.Sprintf("obj-%04d", i), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("obj-%04d at b after its deletion at a: %v, want NotFound", i, err)
		}
	}
}
