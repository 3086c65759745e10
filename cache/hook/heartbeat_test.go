package hook_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/client"
	"github.com/kcp-cache/kcp-cache/cache/hook"
	"github.com/kcp-cache/kcp-cache/cache/replication"
	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
)

const heartbeatInterval = 250 * time.Millisecond

var exportsGVR = schema.GroupVersionResource{Group: "apis.kcp.io", Version: "v1alpha1", Resource: "apiexports"}

// world is a cache, a stand-in server holding the shards' own objects
// (under shards/{shard}/clusters/{cluster}), and a consumer reading the
// cache with the readers group's identity.
type world struct {
	cache, local *cachetest.Server
	localAdmin   *client.ClusterClient
	consumer     *client.ClusterClient
	heartbeats   *client.Heartbeats
	exports      *client.Informer
}

func newWorld(t *testing.T) *world {
	t.Helper()
	w := &world{cache: cachetest.StartServer(t), local: cachetest.StartServer(t)}
	w.localAdmin = clusterClient(t, w.local.Config())
	w.consumer = clusterClient(t, w.cache.UserConfig(t, "dashboard", kcpcache.ReadersGroup))
	w.heartbeats = client.NewHeartbeats(w.consumer)
	factory := client.NewInformerFactory(w.consumer, kcpcache.Scope{}, 0)
	w.exports = factory.ForResource(exportsGVR)
	ctx, cancel := context.WithCancel(context.Background())
	w.heartbeats.Start(ctx)
	factory.Start(ctx)
	t.Cleanup(func() {
		cancel()
		w.heartbeats.Shutdown()
		factory.Shutdown()
	})
	return w
}

func clusterClient(t *testing.T, cfg *rest.Config) *client.ClusterClient {
	t.Helper()
	cfg = client.Unthrottled(cfg)
	c, err := client.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// runningShard is a shard's hook, run as a host's post-start hook runs it.
type runningShard struct {
	hook *hook.Hook
	stop func()
}

// startShard runs the hook of shard with its own identity.
func (w *world) startShard(t *testing.T, shard string) *runningShard {
	t.Helper()
	local := client.NewInformerFactory(w.localAdmin, kcpcache.Scope{Shard: shard, Cluster: kcpcache.Wildcard}, 0)
	h, err := hook.New(hook.Config{
		Shard:             shard,
		CacheConfig:       w.cache.ShardConfig(t, shard),
		LocalSources:      replication.FactorySources(local),
		HeartbeatInterval: heartbeatInterval,
		ProbeInterval:     heartbeatInterval,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), ktesting.NewLogger(t, ktesting.NewConfig()).WithValues("shard", shard)))
	local.Start(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.Run(ctx)
	}()
	s := &runningShard{hook: h}
	var stopped bool
	s.stop = func() {
		if !stopped {
			stopped = true
			cancel()
			<-done
			local.Shutdown()
		}
	}
	t.Cleanup(s.stop)
	return s
}

// createLocal creates an apiexport on shard's own server.
func (w *world) createLocal(t *testing.T, shard, cluster, name string, spec map[string]interface{}) *unstructured.Unstructured {
	t.Helper()
	obj := &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": "apis.kcp.io/v1alpha1", "kind": "APIExport",
		"metadata": map[string]interface{}{"name": name},
		"spec":     spec,
	}}
	out, err := w.localAdmin.Cluster(shard, cluster).Resource(exportsGVR).Create(testContext(t), obj, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// confirmed waits until shard's partition is converged and confirmed in the
// cache's current epoch, and returns its freshness.
func (w *world) confirmed(t *testing.T, shard string) client.PartitionFreshness {
	t.Helper()
	var f client.PartitionFreshness
	cachetest.Eventually(t, shard+"'s partition confirmed and converged", func(context.Context) error {
		f = w.heartbeats.Shard(shard)
		// Not expired: a stopped hook's last heartbeat stays confirmed and
		// converged until its successor replaces it.
		if !f.Known || !f.Confirmed() || f.Expired() || !f.Converged || f.PendingKeys != 0 {
			return fmt.Errorf("freshness %+v", f)
		}
		return nil
	})
	return f
}

func TestHeartbeatAdvancesAndReportsThePartition(t *testing.T) {
	if testing.Short() {
		t.Skip("long scenario (waits for heartbeats to advance): skipped with -short")
	}
	t.Parallel()
	w := newWorld(t)
	created := w.createLocal(t, "indigo", "root", "payments", map[string]interface{}{"v": int64(1)})
	w.startShard(t, "indigo")

	first := w.confirmed(t, "indigo")
	if first.CacheEpoch != w.cache.Server().Epoch() {
		t.Errorf("consumer sees epoch %q, the server has %q", first.CacheEpoch, w.cache.Server().Epoch())
	}
	want := kcpcache.HeartbeatResourceStatus{Resource: "apiexports.apis.kcp.io", Objects: 1, NewestOriginResourceVersion: created.GetResourceVersion()}
	if len(first.Resources) == 0 || first.Resources[0] != want || first.Objects != 1 {
		t.Errorf("resources %+v, want first %+v", first.Resources, want)
	}
	if first.Expired() || first.LeaseDuration != time.Second {
		t.Errorf("a fresh heartbeat: expired %v, lease %s (want 1s: four renewals)", first.Expired(), first.LeaseDuration)
	}
	cachetest.Eventually(t, "the heartbeat renewed", func(context.Context) error {
		if f := w.heartbeats.Shard("indigo"); !f.RenewTime.After(first.RenewTime) {
			return fmt.Errorf("renew time still %s", f.RenewTime)
		}
		return nil
	})

	// What an operator sees with kubectl get: the CRD's printer columns.
	table := getTable(t, w.cache, "/apis/cache.kcp.io/v1alpha1/shardheartbeats")
	for _, col := range []string{"Name", "Renewed", "Converged", "Pending", "Objects"} {
		if !hasColumn(table, col) {
			t.Errorf("table has no column %q: %v", col, table["columnDefinitions"])
		}
	}
	if rows, _ := table["rows"].([]interface{}); len(rows) != 1 || fmt.Sprint(rows[0].(map[string]interface{})["cells"]) != fmt.Sprint([]interface{}{"indigo", cellOf(rows[0], 1), float64(1), true, float64(0), float64(1), float64(0), w.cache.Server().Epoch()}) {
		t.Errorf("table rows %v, want indigo, its age, lease 1, converged, 0 pending, 1 object, 0 regressions, the epoch", table["rows"])
	}
	// The server's per-shard gauges (a shard name no other test uses: the
	// registry is the process's).
	cachetest.Eventually(t, "the per-shard gauges", func(context.Context) error {
		metrics := scrape(t, w.cache)
		for _, line := range []string{
			`kcp_cache_shard_objects{resource="apiexports.apis.kcp.io",shard="indigo"} 1`,
			`kcp_cache_shard_converged{shard="indigo"} 1`,
			`kcp_cache_shard_confirmed{shard="indigo"} 1`,
			`kcp_cache_shard_heartbeat_timestamp_seconds{shard="indigo"}`,
			`kcp_cache_shard_heartbeat_lease_seconds{shard="indigo"} 1`,
		} {
			if !strings.Contains(metrics, line) {
				return fmt.Errorf("no %s in /metrics", line)
			}
		}
		return nil
	})
	// And a shard may not touch another's heartbeat, even by apply.
	other := clusterClient(t, w.cache.ShardConfig(t, "coral"))
	hb := &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": "cache.kcp.io/v1alpha1", "kind": kcpcache.HeartbeatKind,
		"metadata": map[string]interface{}{"name": "indigo"}, "spec": map[string]interface{}{"converged": false},
	}}
	_, err := other.Cluster("indigo", kcpcache.HeartbeatCluster).Resource(kcpcache.HeartbeatResource).Apply(testContext(t), "indigo", hb, metav1.ApplyOptions{FieldManager: "evil", Force: true})
	if !apierrors.IsForbidden(err) {
		t.Errorf("coral applying indigo's heartbeat: err = %v, want Forbidden", err)
	}
}

func getTable(t *testing.T, srv *cachetest.Server, apiPath string) map[string]interface{} {
	t.Helper()
	cfg := srv.Config()
	rc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(testContext(t), http.MethodGet, cfg.Host+kcpcache.ScopedPath(kcpcache.Scope{Shard: "*", Cluster: kcpcache.HeartbeatCluster}, apiPath), nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
	resp, err := rc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	var table map[string]interface{}
	if err := decodeJSON(resp, &table); err != nil {
		t.Fatal(err)
	}
	if table["kind"] != "Table" {
		t.Fatalf("not a table: %v", table)
	}
	return table
}

func hasColumn(table map[string]interface{}, name string) bool {
	cols, _ := table["columnDefinitions"].([]interface{})
	for _, c := range cols {
		if m, ok := c.(map[string]interface{}); ok && m["name"] == name {
			return true
		}
	}
	return false
}

func TestStoppedShardAgesWhileItsDataStaysReadable(t *testing.T) {
	if testing.Short() {
		t.Skip("long scenario (waits for a stopped shard to age): skipped with -short")
	}
	t.Parallel()
	w := newWorld(t)
	w.createLocal(t, "amber", "root", "payments", nil)
	amber := w.startShard(t, "amber")
	w.confirmed(t, "amber")
	lookup := client.FreshLookup{
		Fallback:   client.Fallback{Cache: w.exports.GetIndexer(), Resource: exportsGVR.GroupResource()},
		Heartbeats: w.heartbeats,
	}
	cachetest.Eventually(t, "the copy in the consumer's informer", func(context.Context) error {
		_, _, err := lookup.GetByClusterAndName("root", "payments")
		return err
	})

	amber.stop()
	var ageBefore time.Duration
	cachetest.Eventually(t, "amber's heartbeat expired", func(context.Context) error {
		f := w.heartbeats.Shard("amber")
		if !f.Expired() {
			return fmt.Errorf("age %s within lease %s", f.Age, f.LeaseDuration)
		}
		ageBefore = f.Age
		return nil
	})
	obj, f, err := lookup.GetByClusterAndName("root", "payments")
	if err != nil || obj == nil || f == nil {
		t.Fatalf("data of a stopped shard must stay readable: %v, %v, %v", obj, f, err)
	}
	if !f.Known || f.Age < ageBefore || f.Shard != "amber" || !f.Confirmed() {
		t.Errorf("freshness of the stopped shard's answer: %+v (age must grow from %s; still confirmed: nothing changed the cache)", *f, ageBefore)
	}
	// A consumer that needs fresh data bounds the age.
	lookup.MaxAge = f.LeaseDuration
	_, f, err = lookup.GetByClusterAndName("root", "payments")
	var unavailable *client.PartitionUnavailableError
	if !apierrors.IsServiceUnavailable(err) || !errors.As(err, &unavailable) || f == nil || f.Shard != "amber" {
		t.Fatalf("with MaxAge %s: err = %v, freshness %v; want a PartitionUnavailableError for amber", lookup.MaxAge, err, f)
	}
}

// restoreCase changes the cache's etcd while it is down, as an operator
// would, and says what the shards' partitions hold afterwards.
type restoreCase struct {
	name string
	// prepare runs while every shard is converged, before the change.
	prepare func(t *testing.T, w *world) (change func(dir string) error)
	// coralKnown: after the change, coral's (stopped) partition still has
	// a heartbeat, from the restored data.
	coralKnown bool
}

// An epoch change makes every running hook converge in full again, and a
// consumer sees each partition unconfirmed until its shard has done so: a
// stopped shard's partition stays unconfirmed until the shard returns.
func TestEpochChangeMakesEveryShardRepush(t *testing.T) {
	t.Parallel()
	for _, tc := range []restoreCase{
		{name: "empty etcd", prepare: func(*testing.T, *world) func(string) error { return cachetest.WipeDir }},
		{name: "older copy of etcd", coralKnown: true, prepare: func(t *testing.T, w *world) func(string) error {
			backup := filepath.Join(t.TempDir(), "etcd-backup")
			if err := w.cache.StopEtcdAndCopyData(testContext(t), backup); err != nil {
				t.Fatal(err)
			}
			// Changed after the backup: the restore takes it back.
			w.createLocal(t, "amber", "root", "after-backup", nil)
			w.createLocal(t, "coral", "root", "coral-after-backup", nil)
			cachetest.Eventually(t, "objects after the backup replicated", func(context.Context) error {
				for _, k := range []string{client.ToKey("amber", "root", "", "after-backup"), client.ToKey("coral", "root", "", "coral-after-backup")} {
					if _, ok, _ := w.exports.GetIndexer().GetByKey(k); !ok {
						return fmt.Errorf("%s not in the consumer's informer", k)
					}
				}
				return nil
			})
			return func(dir string) error { return cachetest.CopyDir(backup, dir) }
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if testing.Short() && tc.coralKnown {
				t.Skip("long scenario (a restore from a backup while a shard is stopped): skipped with -short; the empty etcd case covers the epoch change")
			}
			t.Parallel()
			w := newWorld(t)
			w.createLocal(t, "amber", "root", "payments", nil)
			w.createLocal(t, "coral", "root", "billing", nil)
			w.startShard(t, "amber")
			coral := w.startShard(t, "coral")
			w.confirmed(t, "amber")
			w.confirmed(t, "coral")
			change := tc.prepare(t, w)
			w.confirmed(t, "amber")
			w.confirmed(t, "coral")
			epochBefore := w.cache.Server().Epoch()

			coral.stop()
			w.cache.RestartWithEtcdDataForTest(t, change)
			if w.cache.Server().Epoch() == epochBefore {
				t.Fatalf("the change kept epoch %q", epochBefore)
			}
			epochAfter := w.cache.Server().Epoch()
			cachetest.Eventually(t, "the consumer sees the new epoch", func(context.Context) error {
				if f := w.heartbeats.Shard("amber"); f.CacheEpoch != epochAfter {
					return fmt.Errorf("consumer's epoch %q, the server's %q", f.CacheEpoch, epochAfter)
				}
				return nil
			})
			// From the moment a consumer sees the new epoch, no partition
			// counts as confirmed until its shard has re-pushed it.
			for _, shard := range []string{"amber", "coral"} {
				if f := w.heartbeats.Shard(shard); f.Confirmed() && f.Epoch != epochAfter {
					t.Errorf("%s confirmed by a heartbeat of epoch %q", shard, f.Epoch)
				}
			}
			w.confirmed(t, "amber")
			cachetest.Eventually(t, "coral's heartbeat as the new history has it", func(context.Context) error {
				if f := w.heartbeats.Shard("coral"); f.Confirmed() || f.Known != tc.coralKnown {
					return fmt.Errorf("coral, stopped through the change: %+v; want unconfirmed, known=%v", f, tc.coralKnown)
				}
				return nil
			})
			// The consumer's informer relisted: amber's partition is whole
			// again, and nothing of the old history is left.
			cachetest.Eventually(t, "the consumer's informer holds the new history", func(context.Context) error {
				want := map[string]bool{client.ToKey("amber", "root", "", "payments"): true}
				if tc.coralKnown {
					want[client.ToKey("coral", "root", "", "billing")] = true
					want[client.ToKey("amber", "root", "", "after-backup")] = true // re-pushed
				}
				got := map[string]bool{}
				for _, k := range w.exports.GetIndexer().ListKeys() {
					got[k] = true
				}
				if fmt.Sprint(got) != fmt.Sprint(want) {
					return fmt.Errorf("informer holds %v, want %v", got, want)
				}
				return nil
			})

			w.startShard(t, "coral")
			w.confirmed(t, "coral")
			cachetest.Eventually(t, "coral's partition re-pushed", func(context.Context) error {
				for _, name := range []string{"billing", "coral-after-backup"} {
					if name == "coral-after-backup" && !tc.coralKnown {
						continue
					}
					if _, ok, _ := w.exports.GetIndexer().GetByKey(client.ToKey("coral", "root", "", name)); !ok {
						return fmt.Errorf("coral's %s missing", name)
					}
				}
				return nil
			})
		})
	}
}

// A shard restored from a backup has objects older than their copies: they
// are mirrored all the same, and the heartbeat reports it.
func TestOriginWentBackInTimeIsMirroredAndReported(t *testing.T) {
	if testing.Short() {
		t.Skip("long scenario (a shard that goes back in time, waits for the hook to report it): skipped with -short")
	}
	t.Parallel()
	w := newWorld(t)
	w.createLocal(t, "amber", "root", "payments", map[string]interface{}{"v": "old"})
	backup := filepath.Join(t.TempDir(), "shard-backup")
	if err := w.local.StopEtcdAndCopyData(testContext(t), backup); err != nil {
		t.Fatal(err)
	}
	exports := w.localAdmin.Cluster("amber", "root").Resource(exportsGVR)
	obj, err := exports.Get(testContext(t), "payments", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_ = unstructured.SetNestedField(obj.Object, "new", "spec", "v")
	newer, err := exports.Update(testContext(t), obj, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	amber := w.startShard(t, "amber")
	w.confirmed(t, "amber")
	copyHas := func(v, originRV string) func(context.Context) error {
		return func(context.Context) error {
			o, ok, _ := w.exports.GetIndexer().GetByKey(client.ToKey("amber", "root", "", "payments"))
			if !ok {
				return errors.New("no copy")
			}
			u := o.(*unstructured.Unstructured)
			got, _, _ := unstructured.NestedString(u.Object, "spec", "v")
			if got != v || u.GetAnnotations()[kcpcache.AnnotationOriginalResourceVersion] != originRV {
				return fmt.Errorf("copy has v=%q from origin version %s; want %q from %s", got, u.GetAnnotations()[kcpcache.AnnotationOriginalResourceVersion], v, originRV)
			}
			return nil
		}
	}
	cachetest.Eventually(t, "the newer object replicated", copyHas("new", newer.GetResourceVersion()))
	amber.stop()

	w.local.RestartWithEtcdDataForTest(t, func(dir string) error { return cachetest.CopyDir(backup, dir) })
	restored, err := exports.Get(testContext(t), "payments", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if v, _, _ := unstructured.NestedString(restored.Object, "spec", "v"); v != "old" {
		t.Fatalf("the shard's restore did not take it back: v=%q", v)
	}
	w.startShard(t, "amber")
	cachetest.Eventually(t, "the older object mirrored", copyHas("old", restored.GetResourceVersion()))
	f := w.confirmed(t, "amber")
	if f.OriginRegressions != 1 {
		t.Errorf("heartbeat reports %d origin regressions, want 1", f.OriginRegressions)
	}
}

func decodeJSON(resp *http.Response, into interface{}) error {
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %s", resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(into)
}

// scrape returns the cache server's /metrics.
func scrape(t *testing.T, srv *cachetest.Server) string {
	t.Helper()
	cfg := srv.Config()
	rc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(testContext(t), http.MethodGet, cfg.Host+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := rc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s, %v", resp.Status, err)
	}
	return string(b)
}

// cellOf returns cell i of a table row (for cells whose value the test does
// not know, such as an age).
func cellOf(row interface{}, i int) interface{} {
	cells, _ := row.(map[string]interface{})["cells"].([]interface{})
	if i < len(cells) {
		return cells[i]
	}
	return nil
}
