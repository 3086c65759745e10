package integration_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
)

// The scale-out topology: three etcd members, two cache servers on them.
// Objects written through one server under load, while the etcd leader is
// killed, all reach a watch and a list through the other: nothing
// acknowledged is lost.
func TestScaleOutThreeMembersTwoServersLoseNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("long scenario (three etcd members and two servers): skipped with -short")
	}
	t.Parallel()
	cluster := cachetest.StartEtcdCluster(t, 3)
	writer := cachetest.StartServer(t, cachetest.WithFlags(cluster.Flags))
	reader := cachetest.StartServer(t, cachetest.WithFlags(cluster.Flags))
	ctx := testContext(t)

	everywhere := dyn(t, reader, kcpcache.Wildcard, kcpcache.Wildcard).Resource(apiExports)
	list, err := everywhere.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// A watch that resumes from its last resourceVersion when its
	// connection ends, as client-go's informers do.
	w, err := watchtools.NewRetryWatcherWithContext(ctx, list.GetResourceVersion(), &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			return everywhere.Watch(ctx, opts)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var mu sync.Mutex
	watched := sets.New[string]()
	go func() {
		for ev := range w.ResultChan() {
			if ev.Type != watch.Added {
				continue
			}
			if obj, ok := ev.Object.(interface {
				GetName() string
				GetAnnotations() map[string]string
			}); ok {
				mu.Lock()
				watched.Insert(obj.GetAnnotations()[kcpcache.AnnotationShard] + "/" + obj.GetName())
				mu.Unlock()
			}
		}
	}()

	// Eight writers through the other server; the etcd leader is killed
	// (not stopped gracefully) once a third is written. A create that fails
	// is retried until it is stored (AlreadyExists: an earlier attempt was,
	// though its answer was lost).
	const n, writers = 600, 8
	var written atomic.Int64
	leaderStopped := make(chan int, 1)
	var wg sync.WaitGroup
	want := sets.New[string]()
	for i := range n {
		want.Insert(fmt.Sprintf("s%d/export-%03d", i%3, i))
	}
	var retries atomic.Int64
	for wr := range writers {
		wg.Go(func() {
			for i := wr; i < n; i += writers {
				shard := fmt.Sprintf("s%d", i%3)
				c := dyn(t, writer, shard, "root").Resource(apiExports)
				for {
					_, err := c.Create(ctx, apiExport(fmt.Sprintf("export-%03d", i), nil), metav1.CreateOptions{})
					if err == nil || apierrors.IsAlreadyExists(err) {
						break
					}
					if ctx.Err() != nil {
						t.Errorf("creating %s/export-%03d: %v", shard, i, err)
						return
					}
					retries.Add(1)
				}
				if written.Add(1) == n/3 {
					leader, err := cluster.Leader(ctx)
					if err != nil {
						t.Error(err)
						leader = 0
					}
					cluster.Kill(leader)
					leaderStopped <- leader
				}
			}
		})
	}
	wg.Wait()
	t.Logf("killed etcd member %d (the leader) after %d of %d writes; %d failed attempts were retried", <-leaderStopped, n/3, n, retries.Load())

	cachetest.Eventually(t, "every object watched through the other server", func(context.Context) error {
		mu.Lock()
		defer mu.Unlock()
		if missing := want.Difference(watched); missing.Len() > 0 {
			return fmt.Errorf("%d of %d not watched, e.g. %v", missing.Len(), n, sets.List(missing)[:min(3, missing.Len())])
		}
		return nil
	})
	cachetest.Eventually(t, "every object listed through the other server", func(ctx context.Context) error {
		list, err := everywhere.List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		listed := sets.New[string]()
		for _, o := range list.Items {
			listed.Insert(o.GetAnnotations()[kcpcache.AnnotationShard] + "/" + o.GetName())
		}
		if !listed.Equal(want) {
			return fmt.Errorf("listed %d objects, want %d; missing %d", listed.Len(), n, want.Difference(listed).Len())
		}
		return nil
	})
}
