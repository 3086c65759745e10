package integration_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/options"
	"github.com/kcp-cache/kcp-cache/cache/server"
	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
	"github.com/kcp-cache/kcp-cache/cache/server/mirror"
	"github.com/kcp-cache/kcp-cache/cache/server/ports"
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
func peerToken(from, to string) string { return "peer-" + from + "-reads-" + to }

// startRegions starts one cache per name, each peering with every other
// (a full mesh: every pair of caches is a cycle). Peers authenticate with
// static tokens, which survive a region's restart.
func startRegions(t *testing.T, ctx context.Context, names ...string) map[string]*region {
	t.Helper()
	regions := map[string]*region{}
	for _, name := range names {
		port, err := ports.Reserve()
		if err != nil {
			t.Fatal(err)
		}
		var tokens []string
		for _, from := range names {
			if from != name {
				tokens = append(tokens, fmt.Sprintf("%s,%s,%s", peerToken(from, name), kcpcache.PeerUser(from), from))
			}
		}
		tokenFile := filepath.Join(t.TempDir(), "tokens.csv")
		if err := os.WriteFile(tokenFile, []byte(strings.Join(tokens, "\n")+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		r := &region{name: name}
		r.opts = cachetest.Options{RootDirectory: t.TempDir(), EtcdDirectory: t.TempDir(), Port: port}
		r.opts.Flags = func(o *options.Options) {
			o.Authentication.TokenAuthFile = tokenFile
			o.Hierarchy.CacheName = name
			o.Hierarchy.FreshnessWait = 3 * time.Second
		}
		if r.srv, err = cachetest.Start(ctx, r.opts); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = r.srv.Stop() })
		regions[name] = r
	}
	// Now that every cache has its serving certificate, give each its peers.
	for _, r := range regions {
		var peers []string
		for _, p := range regions {
			if p == r {
				continue
			}
			cfg := rest.AnonymousClientConfig(p.srv.Config())
			cfg.BearerToken = peerToken(r.name, p.name)
			file := filepath.Join(t.TempDir(), p.name+".kubeconfig")
			if err := server.WriteKubeconfig(file, cfg); err != nil {
				t.Fatal(err)
			}
			peers = append(peers, p.name+"="+file)
		}
		base := r.opts.Flags
		r.opts.Flags = func(o *options.Options) {
			base(o)
			o.Hierarchy.Peers = peers
		}
		if err := r.srv.Restart(ctx, func(o *cachetest.Options) { o.Flags = r.opts.Flags }); err != nil {
			t.Fatal(err)
		}
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
	copyAtA, err := dyn(t, a.srv, "s-c", "root").Resource(apiExports).Get(ctx, "one", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if copyAtA.GetUID() != home.GetUID() || copyAtA.GetAnnotations()[kcpcache.AnnotationHome] != "c" ||
		copyAtA.GetAnnotations()[kcpcache.AnnotationHomeResourceVersion] != home.GetResourceVersion() {
		t.Fatalf("copy at a: uid %s home %q home-rv %q; home object uid %s rv %s", copyAtA.GetUID(),
			copyAtA.GetAnnotations()[kcpcache.AnnotationHome], copyAtA.GetAnnotations()[kcpcache.AnnotationHomeResourceVersion], home.GetUID(), home.GetResourceVersion())
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
		if len(causes) != 1 || string(causes[0].Type) != mirror.ReasonHomeUnreachable || causes[0].Field != "c" {
			t.Errorf("consistent read of s-c at %s: causes %+v, want one %s naming c", r.name, causes, mirror.ReasonHomeUnreachable)
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
