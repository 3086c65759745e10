package integration_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/options"
	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
)

// moveSample is what one read of a shard's partition during a home move
// answered.
type moveSample struct {
	at         time.Duration
	cache      string
	consistent bool
	code       int
	objects    int
}

// TestShardMovesHomeWithoutHidingAnything: three caches in a full mesh;
// shard-east holds its objects at east. West is restarted with
// --adopt-shard=shard-east. Throughout the move, every 100 ms, east and south
// (and west, once it is back) are read both ways: a stale read
// (resourceVersion=0) must hold every object the shard had acknowledged, a
// consistent read must answer that too or 503; a watch open at east and at
// south must see no DELETED. Afterwards every cache holds the objects as
// west's, and the shard's next write at west reaches them.
func TestShardMovesHomeWithoutHidingAnything(t *testing.T) {
	if testing.Short() {
		t.Skip("long scenario (several caches in regions): skipped with -short")
	}
	ctx := testContext(t)
	regions := startRegions(t, ctx, "east", "west", "south")
	east, west, south := regions["east"], regions["west"], regions["south"]
	const objects = 30
	atEast := east.shard(t, "shard-east")
	for i := range objects {
		if _, err := atEast.Create(ctx, apiExport(fmt.Sprintf("export-%02d", i), map[string]interface{}{"v": "1"}), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range []*region{west, south} {
		waitItems(t, r, "shard-east", objects, "east")
	}

	// The samplers and the watches run from here until the move is over.
	sampleCtx, stopSampling := context.WithCancel(ctx)
	var (
		mu      sync.Mutex
		samples []moveSample
		deleted []string
		wg      sync.WaitGroup
	)
	start := time.Now()
	sample := func(r *region) {
		for _, consistent := range []bool{false, true} {
			rv := "0"
			if consistent {
				rv = ""
			}
			rctx, cancel := context.WithTimeout(sampleCtx, 10*time.Second)
			list, err := dyn(t, r.srv, "shard-east", kcpcache.Wildcard).Resource(apiExports).List(rctx, metav1.ListOptions{ResourceVersion: rv})
			cancel()
			if sampleCtx.Err() != nil {
				return
			}
			s := moveSample{at: time.Since(start), cache: r.name, consistent: consistent}
			switch {
			case err == nil:
				s.code, s.objects = 200, len(list.Items)
			case apierrors.IsServiceUnavailable(err):
				s.code = 503
			default:
				// The cache is restarting (west): a refused connection
				// says nothing of the data.
				continue
			}
			mu.Lock()
			samples = append(samples, s)
			mu.Unlock()
		}
	}
	for _, r := range []*region{east, west, south} {
		wg.Go(func() {
			ticker := time.NewTicker(100 * time.Millisecond)
			defer ticker.Stop()
			for {
				sample(r)
				select {
				case <-sampleCtx.Done():
					return
				case <-ticker.C:
				}
			}
		})
	}
	for _, r := range []*region{east, south} {
		res := dyn(t, r.srv, "shard-east", kcpcache.Wildcard).Resource(apiExports)
		list, err := res.List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			from := list.GetResourceVersion()
			for sampleCtx.Err() == nil {
				timeout := int64(600)
				w, err := res.Watch(sampleCtx, metav1.ListOptions{ResourceVersion: from, TimeoutSeconds: &timeout})
				if err != nil {
					continue
				}
				for ev := range w.ResultChan() {
					if m, err := metaOf(ev.Object); err == nil && m.GetResourceVersion() != "" {
						from = m.GetResourceVersion()
					}
					if ev.Type == watch.Deleted {
						m, _ := metaOf(ev.Object)
						mu.Lock()
						deleted = append(deleted, fmt.Sprintf("%s at %s after %v", m.GetName(), r.name, time.Since(start)))
						mu.Unlock()
					}
				}
				w.Stop()
			}
		})
	}

	// Judged however the test ends: a move that never completes still shows
	// what the readers were answered meanwhile.
	defer func() {
		stopSampling()
		wg.Wait()

		counts := map[string]int{}
		for _, s := range samples {
			key := fmt.Sprintf("%s consistent=%v %d", s.cache, s.consistent, s.code)
			counts[key]++
			if s.code == 200 && s.objects < objects {
				t.Errorf("%v into the move, a %s read at %s answered 200 with %d objects; the shard had acknowledged %d", s.at, map[bool]string{true: "consistent", false: "stale"}[s.consistent], s.cache, s.objects, objects)
			}
		}
		keys := make([]string, 0, len(counts))
		for k := range counts {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			t.Logf("reads during the move: %s: %d", k, counts[k])
		}
		for _, r := range []string{"east", "south"} {
			if counts[r+" consistent=false 200"] < 10 {
				t.Errorf("only %d stale reads at %s answered during the move: too few to judge", counts[r+" consistent=false 200"], r)
			}
		}
		if len(deleted) > 0 {
			t.Errorf("watches saw %d DELETED events for objects that exist throughout: %v", len(deleted), deleted)
		}
	}()

	// The move: west adopts shard-east at a restart.
	west.opts.Flags = func(base func(*options.Options)) func(*options.Options) {
		return func(o *options.Options) {
			base(o)
			o.Hierarchy.AdoptShards = []string{"shard-east"}
		}
	}(west.opts.Flags)
	if err := west.srv.Restart(ctx, func(o *cachetest.Options) { o.Flags = west.opts.Flags }); err != nil {
		t.Fatal(err)
	}
	// Every cache follows west before the shard pushes there: east and
	// south hold every object as west's.
	for _, r := range []*region{east, south} {
		waitItems(t, r, "shard-east", objects, "west")
	}
	// West holds them as its own, and the shard's write there reaches the
	// others.
	waitItems(t, west, "shard-east", objects, "")
	atWest := west.shard(t, "shard-east")
	if _, err := atWest.Update(ctx, apiExport("export-00", map[string]interface{}{"v": "2"}), metav1.UpdateOptions{}); err != nil {
		t.Fatalf("the shard writing at its new home: %v", err)
	}
	for _, r := range []*region{east, south} {
		cachetest.Eventually(t, r.name+" has the shard's write at west", func(ctx context.Context) error {
			got, err := dyn(t, r.srv, "shard-east", "root").Resource(apiExports).Get(ctx, "export-00", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if v := got.Object["spec"].(map[string]interface{})["v"]; v != "2" {
				return fmt.Errorf("spec.v = %v", v)
			}
			return nil
		})
	}

}

func metaOf(obj runtime.Object) (metav1.Object, error) { return meta.Accessor(obj) }
