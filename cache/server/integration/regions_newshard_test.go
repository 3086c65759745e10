package integration_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/server/homes"
)

// TestRelayNewShardIsSeenAtOnceEverywhere: in a chain east - west - south -
// north, a new shard's first write at east is seen by a consistent read at
// north (three hops away) sent right after east acknowledged it, both of
// the shard and of every shard, though no poll has carried the claim to
// north yet; the claims were searched for through every cache. A second
// cache taking the shard's first write right after gets 403 naming east,
// not a second claim. With south stopped, a new shard's first write at
// east, and a consistent read of a shard nobody knows at west, are refused
// 503 naming south (the shard may be claimed beyond it); a read of a shard
// that never existed answers 200 with nothing once every cache answers.
func TestRelayNewShardIsSeenAtOnceEverywhere(t *testing.T) {
	if testing.Short() {
		t.Skip("long scenario (several caches in regions): skipped with -short")
	}
	ctx := lifecycleContext(t)
	g := graphOf([2]string{"east", "west"}, [2]string{"west", "south"}, [2]string{"south", "north"})
	n := startRelayNet(t, ctx, g, "east", "west", "south", "north")
	east, west, south, north := n.regions["east"], n.regions["west"], n.regions["south"], n.regions["north"]
	// Every cache's own route has reached every other, so that the
	// reads below are judged on claims, not on routes still unknown.
	n.waitRoutes(t)

	for i := range 4 {
		s := writeShard(ctx, t, east, fmt.Sprintf("fresh-%d", i), "first")
		if ans, err := north.homesTable(ctx, t, s.name); err != nil || len(ans.Claims) != 0 {
			// Not a failure: the claim came by a poll already, and the
			// read below proves less this round.
			t.Logf("round %d: north knew the claim of %s before the read: %+v, %v", i, s.name, ans.Claims, err)
		}
		began := time.Now()
		got := north.read(ctx, s.name, "")
		took := time.Since(began)
		if got.err != nil {
			t.Fatalf("round %d: a consistent read of %s at north right after east acknowledged its first write: %s", i, s.name, describe(got.err))
		}
		if want := s.partitions(); !slices.Equal(sortedCopy(partitionsOf(got.items)), want) {
			t.Fatalf("round %d: a consistent read of %s at north right after east acknowledged its first write answered %v, want %v", i, s.name, partitionsOf(got.items), want)
		}
		w := writeShard(ctx, t, east, fmt.Sprintf("fresh-wild-%d", i), "first")
		began = time.Now()
		all := north.read(ctx, kcpcache.Wildcard, "")
		t.Logf("round %d: at north, three hops from the home, right after its first write: a consistent read of the shard answered in %s, of every shard in %s", i, took.Round(time.Millisecond), time.Since(began).Round(time.Millisecond))
		if all.err != nil {
			t.Fatalf("round %d: a consistent read of every shard at north right after east acknowledged %s's first write: %s", i, w.name, describe(all.err))
		}
		if !slices.Contains(partitionsOf(all.items), w.partitions()[0]) {
			t.Fatalf("round %d: a consistent read of every shard at north right after east acknowledged %s's first write answered %v, without it", i, w.name, partitionsOf(all.items))
		}
	}

	// Two caches that do not peer take a new shard's first write one
	// right after the other: the second is refused, naming the first.
	first := writeShard(ctx, t, east, "taken-twice", "first")
	_, err := north.shard(t, first.name).Create(ctx, apiExport("second", nil), metav1.CreateOptions{})
	wantForbiddenNaming(t, "taken-twice writing at north right after east claimed it", err, "east")

	// A shard never written anywhere reads as empty, not refused.
	if got := north.read(ctx, "never-written", ""); got.err != nil || len(got.items) != 0 {
		t.Fatalf("a consistent read at north of a shard no cache knows: %d objects, %s; want 200 with none", len(got.items), describe(got.err))
	}

	south.stop(t)
	_, err = east.shard(t, "behind-south").Create(ctx, apiExport("first", nil), metav1.CreateOptions{})
	if e := refusedWith(err, homes.ReasonHomeUnreachable, "south", `asked by "west"`); e != nil {
		t.Fatalf("a new shard's first write at east with south stopped: %v", e)
	}
	if got := west.read(ctx, "unknown-shard", ""); refusedWith(got.err, homes.ReasonHomeUnreachable, "south", "hop west->south") != nil {
		t.Fatalf("a consistent read at west of a shard it knows no claim of, with south stopped: %d objects, %v; want 503 naming south", len(got.items), refusedWith(got.err, homes.ReasonHomeUnreachable, "south", "hop west->south"))
	}
	// Stale reads still answer at once.
	if got := west.read(ctx, "unknown-shard", "0"); got.err != nil {
		t.Fatalf("a stale read at west with south stopped: %s", describe(got.err))
	}

	south.start(t, ctx)
	eventuallyWithin(t, "east takes the new shard's first write once south is back", 2*time.Minute, func(ctx context.Context) error {
		_, err := east.shard(t, "behind-south").Create(ctx, apiExport("first", nil), metav1.CreateOptions{})
		return err
	})
	eventually(t, "north serves behind-south consistently", func(ctx context.Context) error {
		got := north.read(ctx, "behind-south", "")
		if got.err != nil {
			return got.err
		}
		if len(got.items) != 1 {
			return fmt.Errorf("%d objects, want 1", len(got.items))
		}
		return nil
	})
}
