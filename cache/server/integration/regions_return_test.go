package integration_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
)

// A home that stopped cleanly is followed again soon after it returns. A
// clean stop refuses connections at once, so a mirror's attempts to follow
// it fail fast and their spacing grows quickly to its cap: with a 10 s cap,
// mirrors took 7.6-9.9 s after a clean stop to take the home's new writes
// (answering 503 MirrorBehind meanwhile), against 1.2-2.2 s after a
// SIGKILL. The outage lasts long enough for any spacing to reach its cap.
func TestRegionsMirrorFollowsAHomeSoonAfterACleanStop(t *testing.T) {
	if testing.Short() {
		t.Skip("long scenario (several caches in regions): skipped with -short")
	}
	ctx := testContext(t)
	regions := startRegions(t, ctx, "a", "b")
	a, b := regions["a"], regions["b"]
	follows := func(want ...string) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			got, err := b.consistentNames(ctx, t, "s-a")
			if err != nil {
				return err
			}
			if !slices.Equal(got, want) {
				return fmt.Errorf("b lists %v, want %v", got, want)
			}
			return nil
		}
	}
	if _, err := a.shard(t, "s-a").Create(ctx, apiExport("before", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cachetest.Eventually(t, "b follows s-a", follows("s-a/root/before"))

	a.stop(t)
	// The outage: a fault held for its length, not a wait for anything.
	outage := time.NewTimer(14 * time.Second)
	select {
	case <-outage.C:
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	a.start(t, ctx)
	cachetest.Eventually(t, "s-a writes at its returned home", func(ctx context.Context) error {
		_, err := a.shard(t, "s-a").Create(ctx, apiExport("after", nil), metav1.CreateOptions{})
		return err
	})
	written := time.Now()
	cachetest.Eventually(t, "b takes the returned home's write", follows("s-a/root/after", "s-a/root/before"))
	took := time.Since(written)
	t.Logf("b took the write of its returned home %s after it was acknowledged", took.Round(10*time.Millisecond))
	// Attempts at most 2.4 s apart (2 s and its jitter), plus a list and a
	// freshness check on a loaded machine.
	if took > 5*time.Second {
		t.Errorf("b took the returned home's write %s after it was acknowledged, want within 5 s", took.Round(10*time.Millisecond))
	}
}
