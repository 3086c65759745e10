package integration_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/client"
	"github.com/kcp-cache/kcp-cache/cache/options"
	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
	"github.com/kcp-cache/kcp-cache/cache/server/homes"
	"github.com/kcp-cache/kcp-cache/cache/server/mirror"
)

// region is one cache of a hierarchy in a test: a cache server with its
// own embedded etcd, on directories and a port that outlive a stop, so that
// the region can be cut off and come back with its data.
type region struct {
	name string
	srv  *cachetest.Server
	opts cachetest.Options
}

// peerToken is the bearer token with which cache from reads cache to.
func peerToken(from, to string) string { return cachetest.PeerToken(from, to) }

// startRegions starts a cache per name in a full mesh.
func startRegions(t *testing.T, ctx context.Context, names ...string) map[string]*region {
	t.Helper()
	return startRegionsWith(t, ctx, nil, nil, names...)
}

// startRegionsVia is startRegions where cache from reaches cache to at
// via(from, to, host) (a proxy that can cut the link).
func startRegionsVia(t *testing.T, ctx context.Context, via func(from, to, host string) string, names ...string) map[string]*region {
	t.Helper()
	return startRegionsWith(t, ctx, via, nil, names...)
}

// startRegionsWith is startRegionsVia where cache from peers with cache to
// only when peers(from, to) says so, when peers is set.
func startRegionsWith(t *testing.T, ctx context.Context, via func(from, to, host string) string, peersWith func(from, to string) bool, names ...string) map[string]*region {
	t.Helper()
	regions := map[string]*region{}
	for name, r := range cachetest.StartRegions(t, ctx, cachetest.RegionsOptions{Via: via, PeersWith: peersWith}, names...) {
		regions[name] = &region{name: r.Name, srv: r.Srv, opts: r.Opts}
	}
	return regions
}

// stop cuts the region off: its cache and etcd stop, its data stays.
func (r *region) stop(t *testing.T) {
	t.Helper()
	if err := r.srv.Stop(); err != nil {
		t.Fatal(err)
	}
}

// start brings the region back on its data.
func (r *region) start(t *testing.T, ctx context.Context) {
	t.Helper()
	var err error
	if r.srv, err = cachetest.Start(ctx, r.opts); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.srv.Stop() })
}

// shard is the client of shard at this region (its home).
func (r *region) shard(t *testing.T, shard string) dynamic.ResourceInterface {
	t.Helper()
	cfg := r.srv.ShardConfig(t, shard)
	cfg.Host += kcpcache.ScopedPathPrefix(kcpcache.Scope{Shard: shard, Cluster: "root"})
	c, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c.Resource(apiExports)
}

// consistentNames lists the APIExports of shard (or every shard, with
// "*") at the region with a consistent read, as partition/name.
func (r *region) consistentNames(ctx context.Context, t *testing.T, shard string) ([]string, error) {
	list, err := dyn(t, r.srv, shard, kcpcache.Wildcard).Resource(apiExports).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	return sortedCopy(partitionsOf(list.Items)), nil
}

// get reads path at the region as its admin and returns the status code
// and headers.
func (r *region) get(ctx context.Context, t *testing.T, path string) (int, http.Header) {
	t.Helper()
	cfg := r.srv.Config()
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	req, err := newRequest(ctx, http.MethodGet, cfg.Host+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	return resp.StatusCode, resp.Header
}

// TestRegionsMirrorEachOther: three caches in a full mesh, a shard homed at
// each. Every cache serves every partition; a shard writes only at its
// home; with one region cut off the others still serve its partition, stale
// reads with their age and consistent reads refused with the reason; when
// it returns, everything converges and nothing acknowledged is lost.
func TestRegionsMirrorEachOther(t *testing.T) {
	if testing.Short() {
		t.Skip("long scenario (several caches in regions): skipped with -short")
	}
	ctx := testContext(t)
	regions := startRegions(t, ctx, "a", "b", "c")
	a, b, c := regions["a"], regions["b"], regions["c"]

	var want []string
	for _, r := range []*region{a, b, c} {
		shard := "s-" + r.name
		if _, err := r.shard(t, shard).Create(ctx, apiExport("one", map[string]interface{}{"home": r.name}), metav1.CreateOptions{}); err != nil {
			t.Fatalf("shard %s writing at its home %s: %v", shard, r.name, err)
		}
		want = append(want, shard+"/root/one")
	}
	slices.Sort(want)
	// converged: each region answers a consistent read of every partition
	// (the wildcard, or shard by shard) with what its home acknowledged.
	converged := func(shard string, regions ...*region) {
		t.Helper()
		var wantHere []string
		for _, w := range want {
			if shard == kcpcache.Wildcard || strings.HasPrefix(w, shard+"/") {
				wantHere = append(wantHere, w)
			}
		}
		for _, r := range regions {
			cachetest.Eventually(t, "cache "+r.name+" serves the partitions of "+shard, func(ctx context.Context) error {
				got, err := r.consistentNames(ctx, t, shard)
				if err != nil {
					return err
				}
				if !slices.Equal(got, wantHere) {
					return fmt.Errorf("cache %s has %v, want %v", r.name, got, wantHere)
				}
				return nil
			})
		}
	}
	converged(kcpcache.Wildcard, a, b, c)

	// The copy at a mirror is the home's object, provenance kept.
	home, err := c.shard(t, "s-c").Get(ctx, "one", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	copyAtA, err := dynBookkeeping(t, a.srv, "s-c", "root").Resource(apiExports).Get(ctx, "one", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if copyAtA.GetUID() != home.GetUID() || copyAtA.GetAnnotations()[kcpcache.AnnotationHome] != "c" ||
		copyAtA.GetAnnotations()[kcpcache.AnnotationHomeResourceVersion] != home.GetResourceVersion() {
		t.Fatalf("copy at a: uid %s home %q home-rv %q; home object uid %s rv %s", copyAtA.GetUID(),
			copyAtA.GetAnnotations()[kcpcache.AnnotationHome], copyAtA.GetAnnotations()[kcpcache.AnnotationHomeResourceVersion], home.GetUID(), home.GetResourceVersion())
	}
	// A reader that is not a peer gets the copy as the home serves the
	// object: the same members, labels and annotations, every value equal,
	// but for its resourceVersion (a revision of the mirror's own etcd).
	plainAtA, err := dyn(t, a.srv, "s-c", "root").Resource(apiExports).Get(ctx, "one", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := objectDiffButResourceVersion(home, plainAtA); diff != "" {
		t.Fatalf("the copy at a, as a kcp shard reads it, differs from the home's object: %s", diff)
	}
	if diff := objectDiffButResourceVersion(home, copyAtA); diff == "" {
		t.Fatal("the copy read with its bookkeeping equals the home's object: the comparison cannot fail")
	}

	// A shard writes only at its home.
	_, err = b.shard(t, "s-a").Create(ctx, apiExport("elsewhere", nil), metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) {
		t.Fatalf("shard s-a writing at b (its home is a): got %v, want 403", err)
	}

	// Region c is cut off.
	c.stop(t)
	if _, err := a.shard(t, "s-a").Create(ctx, apiExport("two", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	want = append(want, "s-a/root/two")
	slices.Sort(want)
	// The partitions of the regions that are up are read consistently.
	converged("s-a", a, b)
	converged("s-b", a, b)

	for _, r := range []*region{a, b} {
		// A stale read of c's partition: the copy at once, with its age.
		path := kcpcache.ScopedPath(kcpcache.Scope{Shard: "s-c", Cluster: "*"}, "/apis/apis.kcp.io/v1alpha1/apiexports") + "?resourceVersion=0"
		code, header := r.get(ctx, t, path)
		if code != http.StatusOK || !strings.HasPrefix(header.Get(kcpcache.FreshnessAgeHeader), "c=") || !strings.HasPrefix(header.Get(kcpcache.HomeRevisionHeader), "c=") {
			t.Errorf("stale read of s-c at %s: %d, %s %q, %s %q", r.name, code,
				kcpcache.FreshnessAgeHeader, header.Get(kcpcache.FreshnessAgeHeader), kcpcache.HomeRevisionHeader, header.Get(kcpcache.HomeRevisionHeader))
		}
		// A consistent read of it: refused, with the reason.
		_, err := dyn(t, r.srv, "s-c", "*").Resource(apiExports).List(ctx, metav1.ListOptions{})
		if !apierrors.IsServiceUnavailable(err) {
			t.Fatalf("consistent read of s-c at %s with c cut off: got %v, want 503", r.name, err)
		}
		causes := err.(apierrors.APIStatus).Status().Details.Causes
		if len(causes) != 1 || string(causes[0].Type) != homes.ReasonHomeUnreachable || causes[0].Field != "c" {
			t.Errorf("consistent read of s-c at %s: causes %+v, want one %s naming c", r.name, causes, homes.ReasonHomeUnreachable)
		}
		// A's own partition is still read consistently at a.
		if r == a {
			if _, err := dyn(t, r.srv, "s-a", "*").Resource(apiExports).List(ctx, metav1.ListOptions{}); err != nil {
				t.Errorf("consistent read of a's own shard at a with c cut off: %v", err)
			}
		}
	}

	// Region c returns; everything converges, nothing acknowledged lost.
	c.start(t, ctx)
	converged(kcpcache.Wildcard, a, b, c)
}

// TestRegionsHomeRestoredFromBackupNeverGoesBack: a home restored from a
// backup answers in a new epoch with older data. Its mirror holds its copy
// (stale reads keep what the shard acknowledged, consistent reads answer
// 503 HomeRestored) until the shard has converged its partition at the
// home again, and only then follows it.
func TestRegionsHomeRestoredFromBackupNeverGoesBack(t *testing.T) {
	if testing.Short() {
		t.Skip("long scenario (several caches in regions): skipped with -short")
	}
	ctx := testContext(t)
	regions := startRegions(t, ctx, "a", "c")
	a, c := regions["a"], regions["c"]
	if _, err := c.shard(t, "s-c").Create(ctx, apiExport("one", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The shard's heartbeat at its home, converged in the home's epoch.
	putConvergedHeartbeat(ctx, t, c, "s-c")
	namesAt := func(r *region, opts metav1.ListOptions) ([]string, error) {
		list, err := dyn(t, r.srv, "s-c", kcpcache.Wildcard).Resource(apiExports).List(ctx, opts)
		if err != nil {
			return nil, err
		}
		return sortedCopy(partitionsOf(list.Items)), nil
	}
	expect := func(r *region, want ...string) {
		t.Helper()
		cachetest.Eventually(t, "cache "+r.name+" reads "+strings.Join(want, ","), func(ctx context.Context) error {
			got, err := namesAt(r, metav1.ListOptions{})
			if err != nil {
				return err
			}
			if !slices.Equal(got, want) {
				return fmt.Errorf("got %v, want %v", got, want)
			}
			return nil
		})
	}
	expect(a, "s-c/root/one")

	// A backup of c's etcd, then a write the backup does not have.
	c.stop(t)
	backup := t.TempDir()
	if err := os.CopyFS(backup, os.DirFS(c.opts.EtcdDirectory)); err != nil {
		t.Fatal(err)
	}
	c.start(t, ctx)
	epochBefore := c.srv.Server().Epoch()
	if _, err := c.shard(t, "s-c").Create(ctx, apiExport("later", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	expect(a, "s-c/root/later", "s-c/root/one")

	// c is restored from the backup: a new epoch, without "later".
	c.stop(t)
	if err := os.RemoveAll(c.opts.EtcdDirectory); err != nil {
		t.Fatal(err)
	}
	if err := os.CopyFS(c.opts.EtcdDirectory, os.DirFS(backup)); err != nil {
		t.Fatal(err)
	}
	c.start(t, ctx)
	if c.srv.Server().Epoch() == epochBefore {
		t.Fatalf("c restored from a backup kept its epoch %s", epochBefore)
	}
	// The hold engages before the first answer in c's new epoch: the very
	// first consistent read at a is refused, never confirmed against the
	// restored home.
	if got, err := namesAt(a, metav1.ListOptions{}); !apierrors.IsServiceUnavailable(err) {
		t.Fatalf("the first consistent read at a after c's restore: %v, %v; want 503 %s", got, err, mirror.ReasonHomeRestored)
	}
	// a notices and holds its copy: consistent reads say why...
	cachetest.Eventually(t, "a refuses consistent reads of s-c with "+mirror.ReasonHomeRestored, func(ctx context.Context) error {
		_, err := namesAt(a, metav1.ListOptions{})
		if !apierrors.IsServiceUnavailable(err) {
			return fmt.Errorf("got %v, want 503", err)
		}
		causes := err.(apierrors.APIStatus).Status().Details.Causes
		if len(causes) != 1 || string(causes[0].Type) != mirror.ReasonHomeRestored {
			return fmt.Errorf("causes %+v, want %s", causes, mirror.ReasonHomeRestored)
		}
		return nil
	})
	// ...and stale reads still have what the shard acknowledged.
	got, err := namesAt(a, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil || !slices.Equal(got, []string{"s-c/root/later", "s-c/root/one"}) {
		t.Fatalf("stale read at a after c's restore: %v, %v; want later and one", got, err)
	}

	// The shard converges its partition at c again, then says so.
	if _, err := c.shard(t, "s-c").Create(ctx, apiExport("later", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	putConvergedHeartbeat(ctx, t, c, "s-c")
	expect(a, "s-c/root/later", "s-c/root/one")
	got, err = namesAt(a, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil || !slices.Equal(got, []string{"s-c/root/later", "s-c/root/one"}) {
		t.Fatalf("stale read at a after the shard converged again: %v, %v", got, err)
	}

	// A consumer of a's heartbeats sees the partition's home, confirmed in
	// the home's new epoch.
	cc, err := client.NewForConfig(a.srv.Config())
	if err != nil {
		t.Fatal(err)
	}
	heartbeats := client.NewHeartbeats(cc)
	hbCtx, stop := context.WithCancel(ctx)
	defer stop()
	heartbeats.Start(hbCtx)
	defer heartbeats.Shutdown()
	if !heartbeats.WaitForCacheSync(ctx) {
		t.Fatal("heartbeats at a did not sync")
	}
	cachetest.Eventually(t, "a's heartbeat of s-c names its home c, confirmed in c's new epoch", func(ctx context.Context) error {
		f := heartbeats.Shard("s-c")
		if f.Home != "c" || !f.Confirmed() || f.HomeEpoch != c.srv.Server().Epoch() {
			return fmt.Errorf("home %q home epoch %q (c's %q), confirmed %v", f.Home, f.HomeEpoch, c.srv.Server().Epoch(), f.Confirmed())
		}
		return nil
	})
}

// putConvergedHeartbeat writes shard's heartbeat at its home r: converged
// in r's current epoch, as the shard's hook does after a full push.
func putConvergedHeartbeat(ctx context.Context, t *testing.T, r *region, shard string) {
	t.Helper()
	obj := newObject(kcpcache.HeartbeatResource, kcpcache.HeartbeatKind, "", shard, map[string]interface{}{
		"renewTime":            metav1.NewMicroTime(time.Now()).Format(metav1.RFC3339Micro),
		"leaseDurationSeconds": int64(60),
		"converged":            true,
		"epoch":                r.srv.Server().Epoch(),
	})
	hb := dyn(t, r.srv, shard, kcpcache.HeartbeatCluster).Resource(kcpcache.HeartbeatResource)
	existing, err := hb.Get(ctx, shard, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = hb.Create(ctx, obj, metav1.CreateOptions{})
	case err == nil:
		obj.SetResourceVersion(existing.GetResourceVersion())
		_, err = hb.Update(ctx, obj, metav1.UpdateOptions{})
	}
	if err != nil {
		t.Fatalf("writing the heartbeat of %s at %s: %v", shard, r.name, err)
	}
}

// TestReaderNeverGoesBackAcrossCaches: a reader that has seen a home's
// data at one cache and then reads a mirror that is behind (its link to
// the home is cut) is refused the older answer by cache/client, and
// accepts the mirror again once it has caught up.
func TestReaderNeverGoesBackAcrossCaches(t *testing.T) {
	if testing.Short() {
		t.Skip("long scenario (several caches in regions): skipped with -short")
	}
	ctx := testContext(t)
	link := cachetest.NewLinkCutter()
	regions := startRegionsVia(t, ctx, func(from, to, host string) string {
		if from == "b" && to == "a" {
			return link.Via(t, host)
		}
		return host
	}, "a", "b")
	a, b := regions["a"], regions["b"]

	seen := client.NewHomeRevisions()
	readerAt := func(r *region) dynamic.ResourceInterface {
		cfg := r.srv.ScopedConfig("s-a", kcpcache.Wildcard)
		cfg.Wrap(seen.Wrap)
		c, err := dynamic.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return c.Resource(apiExports)
	}
	atA, atB := readerAt(a), readerAt(b)
	names := func(r dynamic.ResourceInterface, opts metav1.ListOptions) ([]string, error) {
		list, err := r.List(ctx, opts)
		if err != nil {
			return nil, err
		}
		return sortedCopy(partitionsOf(list.Items)), nil
	}

	if _, err := a.shard(t, "s-a").Create(ctx, apiExport("one", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cachetest.Eventually(t, "b mirrors s-a", func(ctx context.Context) error {
		got, err := names(atB, metav1.ListOptions{})
		if err != nil || !slices.Equal(got, []string{"s-a/root/one"}) {
			return fmt.Errorf("got %v, %v", got, err)
		}
		return nil
	})

	// b loses its link to a; a acknowledges a second write, which the
	// reader sees at a.
	link.Cut()
	if _, err := a.shard(t, "s-a").Create(ctx, apiExport("two", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got, err := names(atA, metav1.ListOptions{})
	if err != nil || !slices.Equal(got, []string{"s-a/root/one", "s-a/root/two"}) {
		t.Fatalf("consistent read at a: %v, %v", got, err)
	}
	// The reader fails over to b: b's copy is older, and refused.
	_, err = names(atB, metav1.ListOptions{ResourceVersion: "0"})
	var travel *client.TimeTravelError
	if !errors.As(err, &travel) {
		t.Fatalf("stale read at b, behind what the reader saw at a: got %v, want a %T", err, travel)
	}
	// A consistent read at b says why it cannot answer.
	_, err = names(atB, metav1.ListOptions{})
	if !apierrors.IsServiceUnavailable(err) {
		t.Fatalf("consistent read at b with its link to a cut: got %v, want 503", err)
	}

	// The link returns; b catches up and is accepted again.
	link.Restore()
	cachetest.Eventually(t, "b catches up and the reader accepts it", func(ctx context.Context) error {
		got, err := names(atB, metav1.ListOptions{ResourceVersion: "0"})
		if err != nil || !slices.Equal(got, []string{"s-a/root/one", "s-a/root/two"}) {
			return fmt.Errorf("got %v, %v", got, err)
		}
		return nil
	})
}

// TestReaderMovesBetweenMirrorsWhileTheHomeIsDown: two mirrors that hold
// the whole of a partition answer a reader moving between them while the
// home is down, even when one of them had followed more of the home's
// other data: what a reader compares is the last change of the partition
// it reads.
func TestReaderMovesBetweenMirrorsWhileTheHomeIsDown(t *testing.T) {
	if testing.Short() {
		t.Skip("long scenario (three caches in regions): skipped with -short")
	}
	ctx := testContext(t)
	link := cachetest.NewLinkCutter()
	regions := startRegionsVia(t, ctx, func(from, to, host string) string {
		if from == "c" && to == "a" {
			return link.Via(t, host)
		}
		return host
	}, "a", "b", "c")
	a, b, c := regions["a"], regions["b"], regions["c"]

	seen := client.NewHomeRevisions()
	readerAt := func(r *region) dynamic.ResourceInterface {
		cfg := r.srv.ScopedConfig("s-a", kcpcache.Wildcard)
		cfg.Wrap(seen.Wrap)
		d, err := dynamic.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return d.Resource(apiExports)
	}
	atB, atC := readerAt(b), readerAt(c)
	names := func(r dynamic.ResourceInterface) ([]string, error) {
		list, err := r.List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		if err != nil {
			return nil, err
		}
		return sortedCopy(partitionsOf(list.Items)), nil
	}
	if _, err := a.shard(t, "s-a").Create(ctx, apiExport("one", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, r := range []*region{b, c} {
		cachetest.Eventually(t, r.name+" mirrors s-a", func(ctx context.Context) error {
			got, err := dyn(t, r.srv, "s-a", kcpcache.Wildcard).Resource(apiExports).List(ctx, metav1.ListOptions{})
			if err != nil || !slices.Equal(sortedCopy(partitionsOf(got.Items)), []string{"s-a/root/one"}) {
				return fmt.Errorf("got %v, %v", got, err)
			}
			return nil
		})
	}
	// c stops following a; another shard of a writes, which b follows.
	link.Cut()
	if _, err := a.shard(t, "s-other").Create(ctx, apiExport("elsewhere", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	converged := func(ctx context.Context) error {
		got, err := dyn(t, b.srv, "s-other", kcpcache.Wildcard).Resource(apiExports).List(ctx, metav1.ListOptions{})
		if err != nil || len(got.Items) != 1 {
			return fmt.Errorf("got %v, %v", got, err)
		}
		return nil
	}
	cachetest.Eventually(t, "b mirrors s-other", converged)
	// a is lost. The reader reads s-a at b, then at c: same partition,
	// same data, though b followed more of a.
	a.stop(t)
	for _, r := range []dynamic.ResourceInterface{atB, atC, atB} {
		got, err := names(r)
		if err != nil || !slices.Equal(got, []string{"s-a/root/one"}) {
			t.Fatalf("reading s-a at a mirror while its home is down: %v, %v", got, err)
		}
	}
}

// TestShardMovesHome: a shard homed at a moves to c (c started with
// --adopt-shard, the shard pushes its partition there in full). Nothing the
// shard has is lost on the way, its old home turns into a mirror of it, and
// its writes are accepted only at the new home.
func TestShardMovesHome(t *testing.T) {
	if testing.Short() {
		t.Skip("long scenario (several caches in regions): skipped with -short")
	}
	ctx := testContext(t)
	regions := startRegions(t, ctx, "a", "c")
	a, c := regions["a"], regions["c"]
	for _, name := range []string{"one", "gone"} {
		if _, err := a.shard(t, "s").Create(ctx, apiExport(name, map[string]interface{}{"v": "1"}), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// read returns the shard's partition at r (consistent), as name=v@home.
	read := func(ctx context.Context, r *region) ([]string, error) {
		list, err := dynBookkeeping(t, r.srv, "s", kcpcache.Wildcard).Resource(apiExports).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		var out []string
		for _, u := range list.Items {
			v, _, _ := unstructured.NestedString(u.Object, "spec", "v")
			out = append(out, u.GetName()+"="+v+"@"+u.GetAnnotations()[kcpcache.AnnotationHome])
		}
		slices.Sort(out)
		return out, nil
	}
	expect := func(r *region, want ...string) {
		t.Helper()
		cachetest.Eventually(t, r.name+" reads "+strings.Join(want, ","), func(ctx context.Context) error {
			got, err := read(ctx, r)
			if err != nil || !slices.Equal(got, want) {
				return fmt.Errorf("got %v, %v", got, err)
			}
			return nil
		})
	}
	expect(c, "gone=1@a", "one=1@a")

	// The shard moves to c: c adopts it, and until the shard pushes, c
	// serves what it mirrored, as its own objects.
	c.opts.Flags = func(base func(*options.Options)) func(*options.Options) {
		return func(o *options.Options) {
			base(o)
			o.Hierarchy.AdoptShards = []string{"s"}
		}
	}(c.opts.Flags)
	if err := c.srv.Restart(ctx, func(o *cachetest.Options) { o.Flags = c.opts.Flags }); err != nil {
		t.Fatal(err)
	}
	expect(c, "gone=1@", "one=1@")
	expect(a, "gone=1@c", "one=1@c")
	// The shard pushes its partition at c in full: "one" changed, "two" is
	// new, "gone" was deleted on the shard meanwhile.
	atC := c.shard(t, "s")
	if _, err := atC.Update(ctx, apiExport("one", map[string]interface{}{"v": "2"}), metav1.UpdateOptions{}); err != nil {
		t.Fatalf("the shard updating its object at its new home: %v", err)
	}
	if _, err := atC.Create(ctx, apiExport("two", map[string]interface{}{"v": "1"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := atC.Delete(ctx, "gone", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	expect(c, "one=2@", "two=1@")
	// a, the old home, mirrors the shard from c now, and refuses its writes.
	expect(a, "one=2@c", "two=1@c")
	_, err := a.shard(t, "s").Create(ctx, apiExport("three", nil), metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) {
		t.Fatalf("the shard writing at its old home: got %v, want 403", err)
	}
	// The move is a claim of a higher generation; the flag acts once: a
	// restart with it does not claim again.
	if err := c.srv.Restart(ctx, func(o *cachetest.Options) { o.Flags = c.opts.Flags }); err != nil {
		t.Fatal(err)
	}
	for _, r := range []*region{a, c} {
		ans, err := r.homesTable(ctx, t, "s")
		if err != nil || len(ans.Claims) != 1 || ans.Claims[0].Home != "c" || ans.Claims[0].Generation != 2 {
			t.Fatalf("%s's claims of s after the move and a restart with the same --adopt-shard: %+v, %v; want c at generation 2", r.name, ans.Claims, err)
		}
	}
	expect(a, "one=2@c", "two=1@c")
}
