package integration_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/client"
	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
)

// A reader that read a partition at a mirror and then at its home is never
// refused by the home: the mirror's revision (every change of the home
// applied up to it, other shards' changes included) may be above the
// home's revision of that partition (its last change), yet the home's
// consistent answer includes everything it acknowledged. The refusal would
// last until the partition changed again.
func TestReaderMovingToTheHomeIsNotRefused(t *testing.T) {
	if testing.Short() {
		t.Skip("long scenario (several caches in regions): skipped with -short")
	}
	ctx := testContext(t)
	regions := startRegions(t, ctx, "a", "b")
	a, b := regions["a"], regions["b"]

	seen := client.NewHomeRevisions()
	reader := func(r *region, shard string) dynamic.ResourceInterface {
		cfg := r.srv.ScopedConfig(shard, kcpcache.Wildcard)
		cfg.Wrap(seen.Wrap)
		c, err := dynamic.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return c.Resource(apiExports)
	}
	names := func(r dynamic.ResourceInterface) ([]string, error) {
		list, err := r.List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		return sortedCopy(partitionsOf(list.Items)), nil
	}

	// s-a's last change, then a later change of another shard homed at a.
	if _, err := a.shard(t, "s-a").Create(ctx, apiExport("one", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.shard(t, "s-x").Create(ctx, apiExport("later", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// b has applied both; the reader reads s-a there (consistently).
	cachetest.Eventually(t, "b mirrors s-x's later write", func(context.Context) error {
		got, err := names(reader(b, "s-x"))
		if err != nil || !slices.Equal(got, []string{"s-x/root/later"}) {
			return fmt.Errorf("got %v, %v", got, err)
		}
		return nil
	})
	if got, err := names(reader(b, "s-a")); err != nil || !slices.Equal(got, []string{"s-a/root/one"}) {
		t.Fatalf("s-a at b: %v, %v", got, err)
	}
	// Then at its home.
	if got, err := names(reader(a, "s-a")); err != nil || !slices.Equal(got, []string{"s-a/root/one"}) {
		t.Fatalf("s-a at its home after reading it at b: %v, %v", got, err)
	}
}
