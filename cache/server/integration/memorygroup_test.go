package integration_test

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
	"github.com/kcp-cache/kcp-cache/cache/server/embeddedetcd/etcdtest"
)

// growRaftLog writes n revisions of one key outside the cache's prefix,
// through the group's members: enough, beyond the few thousand entries
// etcd keeps, that a member joining afterwards is sent a snapshot, as
// after a shard's full push, instead of the log from its start.
func growRaftLog(ctx context.Context, t *testing.T, through *cachetest.Server, clientURLs []string, n int) {
	t.Helper()
	// The member's own identity in the group (a client of the group needs
	// a certificate of the group's CA).
	tlsConfig, err := through.Server().EmbeddedEtcdTLS().ClientTLSConfig()
	if err != nil {
		t.Fatal(err)
	}
	c := etcdtest.Dial(t, tlsConfig, clientURLs...)
	const writers = 8
	errs := make(chan error, writers)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := w; i < n; i += writers {
				if _, err := c.Put(ctx, "/memory-group-test/log", fmt.Sprint(i)); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// haltAll stops every server at once.
func haltAll(t *testing.T, servers []*cachetest.Server) {
	t.Helper()
	errs := make([]error, len(servers))
	var wg sync.WaitGroup
	for i, srv := range servers {
		wg.Go(func() { errs[i] = srv.Halt() })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("stopping m%d: %v", i, err)
		}
	}
}

// exportsAt lists every APIExport a server holds (a consistent list), as
// partition/name -> the spec's value.
func exportsAt(ctx context.Context, t *testing.T, srv *cachetest.Server) (map[string]string, error) {
	list, err := dyn(t, srv, kcpcache.Wildcard, kcpcache.Wildcard).Resource(apiExports).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	got := map[string]string{}
	for _, o := range list.Items {
		v, _, _ := unstructuredString(o.Object, "spec", "v")
		got[partitionOf(o)] = v
	}
	return got, nil
}

func unstructuredString(obj map[string]interface{}, fields ...string) (string, bool, error) {
	cur := any(obj)
	for _, f := range fields {
		m, ok := cur.(map[string]interface{})
		if !ok {
			return "", false, nil
		}
		cur = m[f]
	}
	s, ok := cur.(string)
	return s, ok, nil
}

// diffExports says how got differs from want; empty when equal.
func diffExports(got, want map[string]string) string {
	if maps.Equal(got, want) {
		return ""
	}
	var missing, wrong []string
	for k, v := range want {
		if g, ok := got[k]; !ok {
			missing = append(missing, k)
		} else if g != v {
			wrong = append(wrong, k)
		}
	}
	return fmt.Sprintf("%d objects, want %d; missing %d (e.g. %v), different %d (e.g. %v)",
		len(got), len(want), len(missing), missing[:min(3, len(missing))], len(wrong), wrong[:min(3, len(wrong))])
}

// Three --storage=memory servers of one group hold the same objects,
// whichever server a shard wrote through; one that restarts while no
// shard writes is whole again from the others, in the same epoch; a group
// restarted as a whole is empty, in a new epoch.
func TestMemoryGroupStaysWhole(t *testing.T) {
	if testing.Short() {
		t.Skip("long scenario (a group of three servers restarted one by one and as a whole): skipped with -short")
	}
	t.Parallel()
	servers, clientURLs := cachetest.StartMemoryGroup(t, 3)
	ctx := testContext(t)
	epoch := epochOf(t, servers[0])
	for i, srv := range servers[1:] {
		if got := epochOf(t, srv); got != epoch {
			t.Errorf("member m%d announces epoch %q, m0 %q", i+1, got, epoch)
		}
	}

	// Shard s<i> writes through server i, each object with its own value.
	want := map[string]string{}
	write := func(through []int, round string, n int) {
		t.Helper()
		for j := range n {
			i := through[j%len(through)]
			shard := fmt.Sprintf("s%d", i)
			name := fmt.Sprintf("%s-%03d", round, j)
			value := fmt.Sprintf("%s written through m%d", name, i)
			c := scopedDyn(t, servers[i].ShardConfig(t, shard), shard, "root").Resource(apiExports)
			if _, err := c.Create(ctx, apiExport(name, map[string]interface{}{"v": value}), metav1.CreateOptions{}); err != nil {
				t.Fatalf("creating %s as %s through m%d: %v", name, shard, i, err)
			}
			want[shard+"/root/"+name] = value
		}
	}
	write([]int{0, 1, 2}, "first", 60)
	// A consistent list is a quorum read: every server answers with every
	// acknowledged write at once, whichever server took it.
	for i, srv := range servers {
		got, err := exportsAt(ctx, t, srv)
		if err != nil {
			t.Fatal(err)
		}
		if d := diffExports(got, want); d != "" {
			t.Errorf("m%d lists %s", i, d)
		}
	}

	if err := servers[2].Halt(); err != nil {
		t.Fatal(err)
	}
	write([]int{0, 1}, "while-m2-down", 40)
	growRaftLog(ctx, t, servers[0], clientURLs[:2], 4000)

	// No shard writes from here on: m2 refills from its peers only.
	start := time.Now()
	resumeCtx, cancel := context.WithTimeout(klog.NewContext(ctx, klog.Background()), cachetest.DefaultTimeout)
	defer cancel()
	if err := servers[2].Resume(resumeCtx); err != nil {
		t.Fatalf("restarting m2: %v", err)
	}
	ready := time.Since(start)
	cachetest.Eventually(t, "m2 lists what its peers list", func(ctx context.Context) error {
		got, err := exportsAt(ctx, t, servers[2])
		if err != nil {
			return err
		}
		if d := diffExports(got, want); d != "" {
			return fmt.Errorf("m2 lists %s", d)
		}
		return nil
	})
	t.Logf("m2 restarted with no shard writing: ready after %s, listed all %d objects after %s",
		ready.Round(time.Millisecond), len(want), time.Since(start).Round(time.Millisecond))
	for i, srv := range servers[:2] {
		got, err := exportsAt(ctx, t, srv)
		if err != nil {
			t.Fatal(err)
		}
		if d := diffExports(got, want); d != "" {
			t.Errorf("m%d lists %s", i, d)
		}
	}
	if got := epochOf(t, servers[2]); got != epoch {
		t.Errorf("m2 rejoined in epoch %q, the group's is %q: clients would relist for nothing", got, epoch)
	}

	// The whole group down: its data is gone, and the group that starts
	// again is a new history.
	haltAll(t, servers)
	errs := make([]error, len(servers))
	var wg sync.WaitGroup
	for i, srv := range servers {
		wg.Go(func() { errs[i] = srv.Resume(resumeCtx) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("restarting m%d with the whole group: %v", i, err)
		}
	}
	renewed := epochOf(t, servers[0])
	if renewed == epoch {
		t.Errorf("a group restarted as a whole kept epoch %q", epoch)
	}
	for i, srv := range servers {
		if got := epochOf(t, srv); got != renewed {
			t.Errorf("m%d announces epoch %q after the group restarted, m0 %q", i, got, renewed)
		}
		got, err := exportsAt(ctx, t, srv)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 0 {
			t.Errorf("m%d holds %d objects after the whole group restarted, want none: %s", i, len(got), strings.Join(keys(got), " "))
		}
	}
}

func keys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// A member left without a majority (the two others down) keeps serving
// what its watch cache holds: a resourceVersion=0 read answers at once
// with every object and says how old its data may be
// (kcpcache.FreshnessAgeHeader), while a consistent read, which needs a
// quorum, and a write are refused with 503 and the reason.
func TestMemoryGroupSurvivorServesStaleReads(t *testing.T) {
	if testing.Short() {
		t.Skip("long scenario (a group of three servers, two stopped, read for 8 s): skipped with -short")
	}
	t.Parallel()
	servers, _ := cachetest.StartMemoryGroup(t, 3)
	ctx := testContext(t)

	want := map[string]string{}
	c := scopedDyn(t, servers[0].ShardConfig(t, "s0"), "s0", "root").Resource(apiExports)
	for j := range 20 {
		name := fmt.Sprintf("before-%02d", j)
		if _, err := c.Create(ctx, apiExport(name, map[string]interface{}{"v": name}), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		want["s0/root/"+name] = name
	}
	// The survivor's watch cache holds every write before its peers go.
	cachetest.Eventually(t, "m0 serves every write from its watch cache", func(ctx context.Context) error {
		got, _, err := staleExportsAt(ctx, t, servers[0])
		if err != nil {
			return err
		}
		if d := diffExports(got, want); d != "" {
			return fmt.Errorf("m0 lists %s", d)
		}
		return nil
	})
	for _, srv := range servers[1:] {
		if err := srv.Halt(); err != nil {
			t.Fatal(err)
		}
	}

	// At once: a few seconds on a loaded machine, far below the ~20 s the
	// survivor needed before it served stale reads without its majority.
	deadline := time.Now().Add(5 * time.Second)
	for {
		got, age, err := staleExportsAt(ctx, t, servers[0])
		if err == nil && diffExports(got, want) == "" && age != "" {
			t.Logf("m0 without its majority: a resourceVersion=0 list answers with all %d objects, %s: %s", len(got), kcpcache.FreshnessAgeHeader, age)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("m0 without its majority did not serve its data within 5 s: err %v, age header %q, %s", err, age, diffExports(got, want))
		}
		time.Sleep(100 * time.Millisecond)
	}

	// And it keeps serving after etcd ended the watch caches' own watches
	// (three election timeouts without a leader): every read until the
	// member has been cut off for 8 s answers with every object.
	for {
		got, age, err := staleExportsAt(ctx, t, servers[0])
		if err != nil || diffExports(got, want) != "" {
			t.Fatalf("m0 cut off from its majority (age %q): %v %s", age, err, diffExports(got, want))
		}
		secs, perr := strconv.ParseFloat(strings.TrimPrefix(age, "m0="), 64)
		if perr != nil {
			t.Fatalf("age header %q: %v", age, perr)
		}
		if secs >= 8 {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}

	// A consistent read and a write need the majority: 503, saying so.
	_, err := exportsAt(ctx, t, servers[0])
	if !apierrors.IsServiceUnavailable(err) || !strings.Contains(err.Error(), "majority") {
		t.Errorf("a consistent list at m0 without its majority: %v, want 503 naming the lost majority", err)
	}
	_, err = c.Create(ctx, apiExport("after", map[string]interface{}{"v": "after"}), metav1.CreateOptions{})
	if !apierrors.IsServiceUnavailable(err) || !strings.Contains(err.Error(), "majority") {
		t.Errorf("a create at m0 without its majority: %v, want 503 naming the lost majority", err)
	}

	// A member that lost its data cannot rejoin without a majority
	// (TestGroupWithoutMajorityRefusesToRejoin); how the held watch resumes
	// when the majority comes back is TestMajorityWatchResumesWhereItStopped.
}

// staleExportsAt lists every APIExport a server holds with
// resourceVersion=0 (served from its watch cache), and the answer's
// kcpcache.FreshnessAgeHeader.
func staleExportsAt(ctx context.Context, t *testing.T, srv *cachetest.Server) (map[string]string, string, error) {
	cfg := srv.Config()
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, "", err
	}
	path := kcpcache.ScopedPath(kcpcache.Scope{Shard: kcpcache.Wildcard, Cluster: kcpcache.Wildcard}, "/apis/apis.kcp.io/v1alpha1/apiexports")
	reqCtx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(reqCtx, http.MethodGet, kcpcache.JoinHostPath(cfg.Host, path)+"?resourceVersion=0", nil)
	if err != nil {
		return nil, "", err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, "", err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, "", err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, "", fmt.Errorf("%s: %s", resp.Status, body)
	}
	var list unstructured.UnstructuredList
	if err := list.UnmarshalJSON(body); err != nil {
		return nil, "", err
	}
	got := map[string]string{}
	for _, o := range list.Items {
		v, _, _ := unstructuredString(o.Object, "spec", "v")
		got[partitionOf(o)] = v
	}
	return got, resp.Header.Get(kcpcache.FreshnessAgeHeader), nil
}

// A survivor of a group whose two other members crashed (SIGKILL: no
// leadership hand-over, no goodbye to their peers) answers every
// resourceVersion=0 list and get from its watch cache at once, with every
// object: from the moment of the crash, through the second or two in which
// it still believes in a leader, until it knows it is cut off from its
// majority; then a consistent read is refused with 503 naming the lost
// majority.
func TestMemoryGroupSurvivorOfCrashesAnswersStaleReadsAtOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("long scenario (a group of three servers, two of them processes that are killed): skipped with -short")
	}
	t.Parallel()
	servers, members, _ := cachetest.StartMemoryGroupWithProcesses(t, 3, 2)
	m0 := servers[0]
	ctx := testContext(t)

	want := map[string]string{}
	c := scopedDyn(t, m0.ShardConfig(t, "s0"), "s0", "root").Resource(apiExports)
	for j := range 20 {
		name := fmt.Sprintf("before-%02d", j)
		if _, err := c.Create(ctx, apiExport(name, map[string]interface{}{"v": name}), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		want["s0/root/"+name] = name
	}
	// The watch cache applies writes in order: holding the last, it holds
	// every one.
	cachetest.Eventually(t, "m0 serves every write from its watch cache", func(ctx context.Context) error {
		_, err := c.Get(ctx, "before-19", metav1.GetOptions{ResourceVersion: "0"})
		return err
	})

	// The lists' answers say when m0 knows it is cut off.
	var age atomic.Value
	age.Store("")
	cfg := m0.ScopedConfig(kcpcache.Wildcard, kcpcache.Wildcard)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return cachetest.RoundTripperFunc(func(req *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(req)
			if err == nil {
				age.Store(resp.Header.Get(kcpcache.FreshnessAgeHeader))
			}
			return resp, err
		})
	})
	all, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	reads := []struct {
		what string
		read func(ctx context.Context) error
	}{
		{"a resourceVersion=0 list", func(ctx context.Context) error {
			list, err := all.Resource(apiExports).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
			if err != nil {
				return err
			}
			got := map[string]string{}
			for _, o := range list.Items {
				v, _, _ := unstructuredString(o.Object, "spec", "v")
				got[partitionOf(o)] = v
			}
			if d := diffExports(got, want); d != "" {
				return fmt.Errorf("it lists %s", d)
			}
			return nil
		}},
		{"a resourceVersion=0 get", func(ctx context.Context) error {
			o, err := c.Get(ctx, "before-07", metav1.GetOptions{ResourceVersion: "0"})
			if err != nil {
				return err
			}
			if v, _, _ := unstructuredString(o.Object, "spec", "v"); v != "before-07" {
				return fmt.Errorf("it answers spec.v %q, want %q", v, "before-07")
			}
			return nil
		}},
	}

	var wg sync.WaitGroup
	for _, m := range members {
		wg.Go(func() {
			if err := m.Kill(); err != nil {
				t.Errorf("killing %s: %v", m.Name, err)
			}
		})
	}
	wg.Wait()
	killed := time.Now()

	// Both reads at once, again and again, each answered within a few
	// seconds at most (the survivor took ~20 s to answer when asked right
	// after the crash), until the survivor knows it is cut off.
	const deadline = 3 * time.Second
	var slowest [2]time.Duration
	rounds := 0
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for ; age.Load() == ""; rounds++ {
		if time.Since(killed) > 15*time.Second {
			t.Fatalf("m0 did not say it was cut off from its majority within 15 s of the crash")
		}
		sent := time.Since(killed)
		errs := make([]error, len(reads))
		for i, r := range reads {
			wg.Go(func() {
				readCtx, cancel := context.WithTimeout(ctx, deadline)
				defer cancel()
				start := time.Now()
				errs[i] = r.read(readCtx)
				slowest[i] = max(slowest[i], time.Since(start))
			})
		}
		// Reads still waiting near the deadline: where they wait.
		answered := make(chan struct{})
		go func() { wg.Wait(); close(answered) }()
		select {
		case <-answered:
		case <-time.After(deadline - deadline/4):
			dumpGoroutines(t)
			<-answered
		}
		for i, r := range reads {
			if errs[i] != nil {
				t.Errorf("%s at m0, sent %s after its peers were killed: %v", r.what, sent.Round(time.Millisecond), errs[i])
			}
		}
		if t.Failed() {
			t.FailNow()
		}
		<-tick.C
	}
	t.Logf("m0 answered %d rounds of both reads from the crash until it said it was cut off (%s, %s after the crash); the slowest list took %s, the slowest get %s",
		rounds, age.Load(), time.Since(killed).Round(time.Millisecond), slowest[0].Round(time.Millisecond), slowest[1].Round(time.Millisecond))

	// Once it knows, what needs the majority is refused, saying why.
	cachetest.EventuallyWithin(t, "a consistent list at m0 answers 503 naming the lost majority", 15*time.Second, func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, deadline)
		defer cancel()
		_, err := exportsAt(ctx, t, m0)
		if !apierrors.IsServiceUnavailable(err) || !strings.Contains(err.Error(), "majority") {
			return fmt.Errorf("a consistent list: %v", err)
		}
		return nil
	})
}

// dumpGoroutines writes every goroutine's stack to the test's artifact
// directory, for a test that finds something waiting (go test -artifacts
// keeps it).
func dumpGoroutines(t *testing.T) {
	t.Helper()
	path := filepath.Join(t.ArtifactDir(), "goroutines.txt")
	f, err := os.Create(path)
	if err != nil {
		t.Log(err)
		return
	}
	defer func() { _ = f.Close() }()
	if err := pprof.Lookup("goroutine").WriteTo(f, 2); err != nil {
		t.Log(err)
		return
	}
	t.Logf("every goroutine's stack, while the reads waited: %s (kept with go test -artifacts)", path)
}
