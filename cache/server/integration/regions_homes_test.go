package integration_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/options"
	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
	"github.com/kcp-cache/kcp-cache/cache/server/homes"
)

// homesTable reads r's table of home claims as its admin.
func (r *region) homesTable(ctx context.Context, t *testing.T, shard string) (kcpcache.HomesAnswer, error) {
	t.Helper()
	return r.homesTableWith(ctx, t, r.srv.Config(), shard)
}

// homesTableWith reads r's table of home claims with cfg's credentials (a
// peer's, say: the table answers a peer with what it passes on to it).
func (r *region) homesTableWith(ctx context.Context, t *testing.T, cfg *rest.Config, shard string) (kcpcache.HomesAnswer, error) {
	t.Helper()
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	req, err := newRequest(ctx, http.MethodGet, cfg.Host+kcpcache.HomesPath+"?shard="+shard, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return kcpcache.HomesAnswer{}, err
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return kcpcache.HomesAnswer{}, fmt.Errorf("%s: %s", resp.Status, body)
	}
	var ans kcpcache.HomesAnswer
	return ans, json.Unmarshal(body, &ans)
}

// items reads shard's partition at r: consistently, or the local copy with
// resourceVersion "0".
func (r *region) items(ctx context.Context, t *testing.T, shard, resourceVersion string) ([]unstructured.Unstructured, error) {
	list, err := dynBookkeeping(t, r.srv, shard, kcpcache.Wildcard).Resource(apiExports).List(ctx, metav1.ListOptions{ResourceVersion: resourceVersion})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

// waitItems waits until a consistent read of shard at r has exactly want
// objects, each held as home (no home annotation) when home is "", else as
// a copy whose home is home.
func waitItems(t *testing.T, r *region, shard string, want int, home string) {
	t.Helper()
	cachetest.Eventually(t, fmt.Sprintf("%s holds %d objects of %s (home %q)", r.name, want, shard, home), func(ctx context.Context) error {
		items, err := r.items(ctx, t, shard, "")
		if err != nil {
			return err
		}
		if len(items) != want {
			return fmt.Errorf("%d objects: %v", len(items), partitionsOf(items))
		}
		for _, u := range items {
			if h := u.GetAnnotations()[kcpcache.AnnotationHome]; h != home {
				return fmt.Errorf("%s has home %q", u.GetName(), h)
			}
		}
		return nil
	})
}

// wantStatus checks err is an API error with code and a cause of reason
// naming field.
func wantStatus(t *testing.T, what string, err error, code int32, reason, field string) {
	t.Helper()
	status, ok := err.(apierrors.APIStatus)
	if !ok || status.Status().Code != code {
		t.Fatalf("%s: got %v, want %d", what, err, code)
	}
	if reason == "" {
		return
	}
	if d := status.Status().Details; d != nil {
		for _, c := range d.Causes {
			if string(c.Type) == reason && c.Field == field {
				return
			}
		}
	}
	t.Fatalf("%s: %v: causes %+v, want one %s naming %q", what, err, status.Status().Details, reason, field)
}

// TestRegionsWriteAtAnotherCacheNeverMovesAHome: a write into a shard's
// partition at a cache that is not its home, by system:masters or by the
// shard itself, is refused with 403 naming the home, and moves nothing: the
// home keeps every object as its own, every mirror keeps its copies. (The
// old rule, homes learnt from who wrote, made the writing cache the home
// and the real home replace its objects with the one written elsewhere.)
func TestRegionsWriteAtAnotherCacheNeverMovesAHome(t *testing.T) {
	if testing.Short() {
		t.Skip("long scenario (several caches in regions): skipped with -short")
	}
	ctx := testContext(t)
	regions := startRegions(t, ctx, "east", "west", "south")
	east, west, south := regions["east"], regions["west"], regions["south"]
	const n = 12
	for i := range n {
		if _, err := east.shard(t, "shard-east").Create(ctx, apiExport(fmt.Sprintf("obj-%02d", i), nil), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitItems(t, east, "shard-east", n, "")
	waitItems(t, west, "shard-east", n, "east")
	waitItems(t, south, "shard-east", n, "east")

	for _, r := range []*region{west, south} {
		asAdmin := dyn(t, r.srv, "shard-east", "root").Resource(apiExports)
		_, err := asAdmin.Create(ctx, apiExport("stray-admin-"+r.name, nil), metav1.CreateOptions{})
		wantStatus(t, "system:masters writing into shard-east's partition at "+r.name, err, http.StatusForbidden, "", "")
		if !strings.Contains(err.Error(), `"east"`) {
			t.Fatalf("the refusal does not name the home east: %v", err)
		}
		_, err = r.shard(t, "shard-east").Create(ctx, apiExport("stray-shard-"+r.name, nil), metav1.CreateOptions{})
		wantStatus(t, "shard-east writing at "+r.name, err, http.StatusForbidden, "", "")
		err = asAdmin.Delete(ctx, "obj-00", metav1.DeleteOptions{})
		wantStatus(t, "system:masters deleting a copy of shard-east at "+r.name, err, http.StatusForbidden, "", "")
	}
	// A marker written at the home reaches every cache; nothing else moved.
	if _, err := east.shard(t, "shard-east").Create(ctx, apiExport("marker", nil), metav1.CreateOptions{}); err != nil {
		t.Fatalf("shard-east writing at its home east after the stray writes: %v", err)
	}
	waitItems(t, east, "shard-east", n+1, "")
	waitItems(t, west, "shard-east", n+1, "east")
	waitItems(t, south, "shard-east", n+1, "east")
	for _, r := range []*region{east, west, south} {
		ans, err := r.homesTable(ctx, t, "shard-east")
		if err != nil {
			t.Fatal(err)
		}
		if len(ans.Claims) != 1 || ans.Claims[0].Home != "east" || ans.Claims[0].Generation != 1 || ans.Claims[0].Held != (r == east) {
			t.Fatalf("%s's claims of shard-east: %+v, want east at generation 1", r.name, ans.Claims)
		}
	}
}

// TestRegionsWriteWhileCut: two caches cut from each other. A shard whose
// home is known is refused (403) at the other cache; a shard no cache knows
// is refused (503 naming the unreachable peer) at both, so that the cut
// cannot make two homes; nothing is deleted at the home. Once the link is
// back, the first cache to take the new shard is its home, and the other
// refuses it with 403.
func TestRegionsWriteWhileCut(t *testing.T) {
	if testing.Short() {
		t.Skip("long scenario (several caches in regions): skipped with -short")
	}
	ctx := testContext(t)
	aToB, bToA := cachetest.NewLinkCutter(), cachetest.NewLinkCutter()
	regions := startRegionsVia(t, ctx, func(from, to, host string) string {
		if from == "a" {
			return aToB.Via(t, host)
		}
		return bToA.Via(t, host)
	}, "a", "b")
	a, b := regions["a"], regions["b"]
	const n = 10
	for i := range n {
		if _, err := a.shard(t, "s-a").Create(ctx, apiExport(fmt.Sprintf("obj-%02d", i), nil), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitItems(t, b, "s-a", n, "a")

	aToB.Cut()
	bToA.Cut()
	_, err := dyn(t, b.srv, "s-a", "root").Resource(apiExports).Create(ctx, apiExport("stray", nil), metav1.CreateOptions{})
	wantStatus(t, "system:masters writing s-a at b, cut from its home", err, http.StatusForbidden, "", "")
	_, err = b.shard(t, "s-a").Create(ctx, apiExport("stray", nil), metav1.CreateOptions{})
	wantStatus(t, "s-a writing at b, cut from its home", err, http.StatusForbidden, "", "")
	_, err = b.shard(t, "s-new").Create(ctx, apiExport("one", nil), metav1.CreateOptions{})
	wantStatus(t, "a new shard writing at b, cut from a", err, http.StatusServiceUnavailable, homes.ReasonHomeUnreachable, "a")
	_, err = a.shard(t, "s-new").Create(ctx, apiExport("one", nil), metav1.CreateOptions{})
	wantStatus(t, "a new shard writing at a, cut from b", err, http.StatusServiceUnavailable, homes.ReasonHomeUnreachable, "b")
	waitItems(t, a, "s-a", n, "")

	aToB.Restore()
	bToA.Restore()
	cachetest.Eventually(t, "the new shard writes at b once b reaches a", func(ctx context.Context) error {
		_, err := b.shard(t, "s-new").Create(ctx, apiExport("one", nil), metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	})
	_, err = a.shard(t, "s-new").Create(ctx, apiExport("two", nil), metav1.CreateOptions{})
	wantStatus(t, "the new shard writing at a after b claimed it", err, http.StatusForbidden, "", "")
	waitItems(t, a, "s-a", n, "")
	waitItems(t, b, "s-a", n, "a")
	waitItems(t, a, "s-new", 1, "b")
}

// TestRegionsHomeConflictKeepsBothSides: two caches that each took a shard's
// writes while they did not peer (a misconfiguration) claim it at the same
// generation once they do. The conflict is reported (503 HomeConflict on
// writes and consistent reads, the table names both), both keep their own
// objects, and the operator resolves it with --adopt-shard.
func TestRegionsHomeConflictKeepsBothSides(t *testing.T) {
	if testing.Short() {
		t.Skip("long scenario (several caches in regions): skipped with -short")
	}
	ctx := testContext(t)
	regions := startRegions(t, ctx, "a", "b")
	a, b := regions["a"], regions["b"]
	for _, r := range []*region{a, b} {
		alone := func(base func(*options.Options)) func(*options.Options) {
			return func(o *options.Options) {
				base(o)
				o.Hierarchy.Peers = nil
			}
		}(r.opts.Flags)
		if err := r.srv.Restart(ctx, func(o *cachetest.Options) { o.Flags = alone }); err != nil {
			t.Fatal(err)
		}
	}
	// Both are alone before either is written to: otherwise the second
	// learns the first one's claim before it is cut off, and refuses.
	for _, r := range []*region{a, b} {
		if _, err := r.shard(t, "s-x").Create(ctx, apiExport("from-"+r.name, nil), metav1.CreateOptions{}); err != nil {
			t.Fatalf("s-x writing at %s alone: %v", r.name, err)
		}
	}
	for _, r := range []*region{a, b} {
		if err := r.srv.Restart(ctx, func(o *cachetest.Options) { o.Flags = r.opts.Flags }); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range []*region{a, b} {
		other := map[string]string{"a": "b", "b": "a"}[r.name]
		cachetest.Eventually(t, r.name+" reports the conflict", func(ctx context.Context) error {
			ans, err := r.homesTable(ctx, t, "s-x")
			if err != nil {
				return err
			}
			if len(ans.Claims) != 1 || ans.Claims[0].ConflictsWith == "" {
				return fmt.Errorf("claims %+v", ans.Claims)
			}
			return nil
		})
		_, err := r.shard(t, "s-x").Create(ctx, apiExport("more", nil), metav1.CreateOptions{})
		wantStatus(t, "s-x writing at "+r.name+" in conflict", err, http.StatusServiceUnavailable, homes.ReasonHomeConflict, "s-x")
		_, err = r.items(ctx, t, "s-x", "")
		if !apierrors.IsServiceUnavailable(err) || !strings.Contains(err.Error(), "both claim") {
			t.Fatalf("consistent read of s-x at %s in conflict: %v, want 503 naming the conflict", r.name, err)
		}
		// Each keeps its own object; neither took the other's.
		items, err := r.items(ctx, t, "s-x", "0")
		if err != nil {
			t.Fatal(err)
		}
		if got := partitionsOf(items); !slices.Equal(got, []string{"s-x/root/from-" + r.name}) {
			t.Fatalf("%s holds %v of s-x in conflict, want only its own (not %s's)", r.name, got, other)
		}
	}

	// The operator resolves it: a adopts s-x.
	adopt := func(base func(*options.Options)) func(*options.Options) {
		return func(o *options.Options) {
			base(o)
			o.Hierarchy.AdoptShards = []string{"s-x"}
		}
	}(a.opts.Flags)
	if err := a.srv.Restart(ctx, func(o *cachetest.Options) { o.Flags = adopt }); err != nil {
		t.Fatal(err)
	}
	waitItems(t, a, "s-x", 1, "")
	cachetest.Eventually(t, "b mirrors s-x from a", func(ctx context.Context) error {
		items, err := b.items(ctx, t, "s-x", "")
		if err != nil {
			return err
		}
		if got := partitionsOf(items); !slices.Equal(got, []string{"s-x/root/from-a"}) || items[0].GetAnnotations()[kcpcache.AnnotationHome] != "a" {
			return fmt.Errorf("b holds %v", got)
		}
		return nil
	})
	_, err := b.shard(t, "s-x").Create(ctx, apiExport("more", nil), metav1.CreateOptions{})
	wantStatus(t, "s-x writing at b after a adopted it", err, http.StatusForbidden, "", "")
}

// TestRegionsHomeLosesItsStorage: a home whose etcd is lost comes back
// empty and without its claims. It gets its claims back from its peers (it
// is named there) and takes the shard's writes again; the mirror neither
// claims the shard nor drops its copies.
func TestRegionsHomeLosesItsStorage(t *testing.T) {
	if testing.Short() {
		t.Skip("long scenario (several caches in regions): skipped with -short")
	}
	ctx := testContext(t)
	regions := startRegions(t, ctx, "a", "b")
	a, b := regions["a"], regions["b"]
	for i := range 3 {
		if _, err := a.shard(t, "s-a").Create(ctx, apiExport(fmt.Sprintf("obj-%d", i), nil), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitItems(t, b, "s-a", 3, "a")
	a.stop(t)
	if err := os.RemoveAll(a.opts.EtcdDirectory); err != nil {
		t.Fatal(err)
	}
	a.start(t, ctx)
	_, err := b.shard(t, "s-a").Create(ctx, apiExport("stray", nil), metav1.CreateOptions{})
	wantStatus(t, "s-a writing at b while its home a lost its storage", err, http.StatusForbidden, "", "")
	cachetest.Eventually(t, "a gets its claim of s-a back", func(ctx context.Context) error {
		ans, err := a.homesTable(ctx, t, "s-a")
		if err != nil {
			return err
		}
		if len(ans.Claims) != 1 || !ans.Claims[0].Held || ans.Claims[0].Generation != 1 {
			return fmt.Errorf("claims %+v", ans.Claims)
		}
		return nil
	})
	if _, err := a.shard(t, "s-a").Create(ctx, apiExport("obj-0", nil), metav1.CreateOptions{}); err != nil {
		t.Fatalf("s-a pushing at its home a again: %v", err)
	}
	items, err := b.items(ctx, t, "s-a", "0")
	if err != nil || len(items) != 3 {
		t.Fatalf("b's copies of s-a after a lost its storage: %v, %v; want the 3 it held", partitionsOf(items), err)
	}
}

// TestRegionsStaleReadHeaderIsExact: a shard updates one object many times
// at its home (a counter in it) while readers read it with resourceVersion
// "0" at the mirror, by LIST and by GET. Each answer is the home's state at
// exactly the revision its header names: the counter in it is the one the
// shard wrote by that revision (the writer's own record), not less (the
// header ran ahead) and not more (the answer ran ahead of its header).
func TestRegionsStaleReadHeaderIsExact(t *testing.T) {
	if testing.Short() {
		t.Skip("long scenario (several caches in regions): skipped with -short")
	}
	ctx := testContext(t)
	regions := startRegions(t, ctx, "a", "b")
	a, b := regions["a"], regions["b"]
	atA := a.shard(t, "s-a")
	obj, err := atA.Create(ctx, apiExport("counter", map[string]interface{}{"n": int64(0)}), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitItems(t, b, "s-a", 1, "a")

	cfg := b.srv.Config()
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	collection := cfg.Host + kcpcache.ScopedPath(kcpcache.Scope{Shard: "s-a", Cluster: "root"}, "/apis/apis.kcp.io/v1alpha1/apiexports")
	type seen struct {
		verb              string
		promised, counter int64
	}
	var (
		readsMu sync.Mutex
		reads   []seen
	)
	// Several readers, each reading as fast as it can, to meet the window
	// between the mirror applying a write and its watch cache having it.
	const readers = 4
	readerDone := make(chan error, readers)
	writerDone := make(chan struct{})
	read := func(verb string) error {
		url := collection + "?resourceVersion=0"
		if verb == "get" {
			url = collection + "/counter?resourceVersion=0"
		}
		req, err := newRequest(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("stale read at b: %s: %s", resp.Status, body)
		}
		entries, err := kcpcache.ParseHomeRevisions(resp.Header.Get(kcpcache.HomeRevisionHeader))
		if err != nil || len(entries) != 1 {
			return fmt.Errorf("header %q: %v", resp.Header.Get(kcpcache.HomeRevisionHeader), err)
		}
		var u unstructured.Unstructured
		if verb == "get" {
			if err := u.UnmarshalJSON(body); err != nil {
				return fmt.Errorf("body %s: %v", body, err)
			}
		} else {
			var list unstructured.UnstructuredList
			if err := list.UnmarshalJSON(body); err != nil || len(list.Items) != 1 {
				return fmt.Errorf("body %s: %v", body, err)
			}
			u = list.Items[0]
		}
		n, _, _ := unstructured.NestedInt64(u.Object, "spec", "n")
		readsMu.Lock()
		reads = append(reads, seen{verb, entries[0].Revision, n})
		readsMu.Unlock()
		return nil
	}
	for i := range readers {
		verb := []string{"list", "get"}[i%2]
		go func() {
			for {
				select {
				case <-writerDone:
					readerDone <- nil
					return
				default:
				}
				if err := read(verb); err != nil {
					readerDone <- err
					return
				}
			}
		}()
	}
	// The writer's record: the home revision of each update and its counter.
	written := map[int64]int64{}
	rv, _ := strconv.ParseInt(obj.GetResourceVersion(), 10, 64)
	written[rv] = 0
	const updates = 200
	for i := int64(1); i <= updates; i++ {
		if err := unstructured.SetNestedField(obj.Object, i, "spec", "n"); err != nil {
			t.Fatal(err)
		}
		if obj, err = atA.Update(ctx, obj, metav1.UpdateOptions{}); err != nil {
			close(writerDone)
			t.Fatalf("update %d at the home: %v", i, err)
		}
		rv, _ := strconv.ParseInt(obj.GetResourceVersion(), 10, 64)
		written[rv] = i
	}
	close(writerDone)
	for range readers {
		if err := <-readerDone; err != nil {
			t.Fatal(err)
		}
	}
	// at is the counter the shard had written by home revision r.
	at := func(r int64) int64 {
		var best, bestRV int64 = -1, -1
		for rv, n := range written {
			if rv <= r && rv > bestRV {
				best, bestRV = n, rv
			}
		}
		return best
	}
	var wrong []string
	byVerb := map[string]int{}
	for _, s := range reads {
		byVerb[s.verb]++
		if want := at(s.promised); s.counter != want {
			wrong = append(wrong, fmt.Sprintf("%s: header names revision %d (counter %d there), body has %d", s.verb, s.promised, want, s.counter))
		}
	}
	t.Logf("%d stale reads (%d lists, %d gets) during %d updates", len(reads), byVerb["list"], byVerb["get"], updates)
	if byVerb["list"] < 20 || byVerb["get"] < 20 {
		t.Fatalf("only %d lists and %d gets during the updates: the test proves little", byVerb["list"], byVerb["get"])
	}
	if len(wrong) > 0 {
		t.Fatalf("%d of %d stale reads at the mirror were not the home's state at their header's revision: %v", len(wrong), len(reads), wrong)
	}
}
