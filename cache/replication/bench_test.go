package replication

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/client"
	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
)

// benchObjects is the size of the initial sync; KCP_CACHE_BENCH_OBJECTS or
// -replication.objects make quick runs smaller.
var benchObjects = flag.Int("replication.objects", envInt("KCP_CACHE_BENCH_OBJECTS", 10000), "objects in BenchmarkReplication's initial sync")

const (
	benchClusters   = 10
	benchChangeRate = 200 // local changes per second in the lag phase
	benchLagPhase   = 3 * time.Second
	// seedConcurrency fills the shard quickly; it is not measured.
	seedConcurrency = 16
)

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// BenchmarkReplication measures, in one run (use -benchtime=1x):
//   - sync-s: the initial sync of a shard holding -replication.objects
//     apiexports, from Run until InitialSyncDone;
//   - direct-s: writing the same copies straight into the cache with as many
//     concurrent writers as the controller has workers, and sync/direct;
//   - lag-p50-ms, lag-p99-ms, lag-max-ms: replication lag (local event
//     observed to cache write acknowledged) under a steady 200 changes/s.
func BenchmarkReplication(b *testing.B) {
	// The servers' logs would drown the results.
	klog.LogToStderr(false)
	klog.SetOutput(io.Discard)
	n := *benchObjects
	workers := DefaultWorkers
	cacheSrv, localSrv := cachetest.StartServer(b), cachetest.StartServer(b)
	cacheAdmin, localAdmin := clusterClient(b, cacheSrv.Config()), clusterClient(b, localSrv.Config())
	ctx := context.Background()

	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("export-%05d", i)
	}
	clusterOf := func(i int) string { return fmt.Sprintf("c%d", i%benchClusters) }
	parallel(b, seedConcurrency, n, func(i int) error {
		_, err := localAdmin.Cluster("bench", clusterOf(i)).Resource(exportsGVR).Create(ctx, export(names[i], "v0"), metav1.CreateOptions{})
		return err
	})
	locals, err := localAdmin.Cluster("bench", kcpcache.Wildcard).Resource(exportsGVR).List(ctx, metav1.ListOptions{})
	if err != nil || len(locals.Items) != n {
		b.Fatalf("seeding: %d objects, %v", len(locals.Items), err)
	}

	// Warm both write paths up, then write the copies directly: the baseline.
	parallel(b, workers, 200, func(i int) error {
		_, err := cacheAdmin.Cluster("warmup", "root").Resource(exportsGVR).Create(ctx, export(names[i%n]+"-"+strconv.Itoa(i), "w"), metav1.CreateOptions{})
		return err
	})
	start := time.Now()
	parallel(b, workers, n, func(i int) error {
		l := &locals.Items[i]
		_, err := cacheAdmin.Cluster("direct", l.GetAnnotations()[kcpcache.AnnotationCluster]).Resource(exportsGVR).Create(ctx, desiredCopy("direct", l), metav1.CreateOptions{})
		return err
	})
	direct := time.Since(start)

	// The same objects through the controller.
	h := &harness{cache: cacheSrv, local: localSrv, cacheAdmin: cacheAdmin, localAdmin: localAdmin}
	factory := client.NewInformerFactory(localAdmin, kcpcache.Scope{Shard: "bench", Cluster: kcpcache.Wildcard}, 0)
	ctrl, err := NewController(&Config{Shard: "bench", CacheClient: clusterClient(b, cacheSrv.Config()), LocalSources: FactorySources(factory)})
	if err != nil {
		b.Fatal(err)
	}
	lags := &lagRecorder{}
	ctrl.observeLag = lags.record
	// The controller logs to the benchmark output: its progress lines show
	// how the initial sync advances.
	logger := ktesting.NewLogger(b, ktesting.NewConfig(ktesting.Verbosity(0)))
	runCtx, cancel := context.WithCancel(klog.NewContext(ctx, logger))
	done := make(chan struct{})
	b.Cleanup(func() { cancel(); <-done; factory.Shutdown() })
	b.ResetTimer()
	start = time.Now()
	go func() { defer close(done); ctrl.Run(runCtx, workers) }()
	factory.Start(runCtx)
	select {
	case <-ctrl.InitialSyncDone():
	case <-time.After(10 * time.Minute):
		b.Fatal("initial sync not done within 10 minutes")
	}
	syncTime := time.Since(start)
	b.StopTimer()
	if got := copiesIn(b, h, "bench"); got != n {
		b.Fatalf("%d copies after the initial sync, want %d", got, n)
	}

	// Steady changes: distinct objects, so no change waits for another.
	lags.reset()
	changes := int(benchLagPhase.Seconds() * benchChangeRate)
	ticker := time.NewTicker(time.Second / benchChangeRate)
	work := make(chan int)
	var writers sync.WaitGroup
	for range 4 {
		writers.Go(func() {
			for i := range work {
				patch := fmt.Appendf(nil, `{"spec":{"value":"v%d"}}`, i)
				if _, err := localAdmin.Cluster("bench", clusterOf(i%n)).Resource(exportsGVR).Patch(ctx, names[i%n], types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
					b.Error(err)
				}
			}
		})
	}
	for i := 0; i < changes; i++ {
		<-ticker.C
		work <- i
	}
	ticker.Stop()
	close(work)
	writers.Wait()
	// Wait until every change is in the cache. A change is measured unless
	// a reconcile that was already running (for the echo of an earlier write)
	// picked it up before its event arrived, so nearly all are.
	lastChange := map[int]int{} // object → its last change
	for i := 0; i < changes; i++ {
		lastChange[i%n] = i
	}
	err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := cacheAdmin.Cluster("bench", kcpcache.Wildcard).Resource(exportsGVR).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		values := map[string]interface{}{}
		for _, u := range list.Items {
			values[u.GetName()], _, _ = unstructured.NestedString(u.Object, "spec", "value")
		}
		for obj, i := range lastChange {
			if values[names[obj]] != fmt.Sprintf("v%d", i) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		b.Fatalf("the %d changes did not all reach the cache within 30s", changes)
	}
	p50, p99, maxLag, measured := lags.percentiles()

	b.ReportMetric(0, "ns/op")
	b.ReportMetric(float64(n), "objects")
	b.ReportMetric(syncTime.Seconds(), "sync-s")
	b.ReportMetric(direct.Seconds(), "direct-s")
	b.ReportMetric(syncTime.Seconds()/direct.Seconds(), "sync/direct")
	b.ReportMetric(float64(p50.Microseconds())/1000, "lag-p50-ms")
	b.ReportMetric(float64(p99.Microseconds())/1000, "lag-p99-ms")
	b.ReportMetric(float64(maxLag.Microseconds())/1000, "lag-max-ms")
	b.ReportMetric(float64(measured), "lag-samples")
}

// parallel runs f(0..n-1) on concurrency goroutines and fails b on the
// first error.
func parallel(b *testing.B, concurrency, n int, f func(i int) error) {
	b.Helper()
	next := make(chan int)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for range concurrency {
		wg.Go(func() {
			for i := range next {
				if err := f(i); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
				}
			}
		})
	}
	for i := 0; i < n; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	if firstErr != nil {
		b.Fatal(firstErr)
	}
}

// copiesIn counts a shard's export copies in the cache.
func copiesIn(b *testing.B, h *harness, shard string) int {
	b.Helper()
	list, err := h.cacheAdmin.Cluster(shard, kcpcache.Wildcard).Resource(exportsGVR).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	return len(list.Items)
}

// lagRecorder collects the controller's lag measurements.
type lagRecorder struct {
	mu   sync.Mutex
	lags []time.Duration
}

func (r *lagRecorder) record(_ schema.GroupVersionResource, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lags = append(r.lags, d)
}

func (r *lagRecorder) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lags = nil
}

func (r *lagRecorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.lags)
}

// percentiles returns the 50th and 99th percentile, the maximum and the
// number of measurements.
func (r *lagRecorder) percentiles() (p50, p99, maxLag time.Duration, n int) {
	r.mu.Lock()
	sorted := append([]time.Duration(nil), r.lags...)
	r.mu.Unlock()
	if len(sorted) == 0 {
		return 0, 0, 0, 0
	}
	sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
	at := func(q float64) time.Duration { return sorted[min(len(sorted)-1, int(q*float64(len(sorted))))] }
	return at(0.50), at(0.99), sorted[len(sorted)-1], len(sorted)
}
