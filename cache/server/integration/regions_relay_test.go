package integration_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
	"github.com/kcp-cache/kcp-cache/cache/server/homes"
	"github.com/kcp-cache/kcp-cache/cache/server/mirror"
)

// routes reads r's homes table as its admin and returns its routes by home.
func (r *region) routes(ctx context.Context) (map[string]kcpcache.Route, error) {
	cfg := r.srv.Config()
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	req, err := newRequest(ctx, http.MethodGet, cfg.Host+kcpcache.HomesPath, nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s's homes table: %s: %s", r.name, resp.Status, body)
	}
	var ans kcpcache.HomesAnswer
	if err := json.Unmarshal(body, &ans); err != nil {
		return nil, fmt.Errorf("%s's homes table %s: %w", r.name, body, err)
	}
	out := map[string]kcpcache.Route{}
	for _, route := range ans.Routes {
		out[route.Home] = route
	}
	return out, nil
}

// partitionRead is what one list of a shard's partition answered: its
// objects (with their copy bookkeeping) and headers, or the error.
type partitionRead struct {
	items  []unstructured.Unstructured
	header http.Header
	err    error
}

// read lists shard's partition at r (every shard with kcpcache.Wildcard)
// as its admin, with the copies' bookkeeping: consistently with
// resourceVersion "", the local copy with "0". It does not fail the test,
// so that samplers may call it.
func (r *region) read(ctx context.Context, shard, resourceVersion string) partitionRead {
	var out partitionRead
	cfg := r.srv.ScopedConfig(shard, kcpcache.Wildcard)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			req = req.Clone(req.Context())
			req.Header.Set(kcpcache.CopyBookkeepingHeader, "keep")
			resp, err := rt.RoundTrip(req)
			if resp != nil {
				out.header = resp.Header
			}
			return resp, err
		})
	})
	c, err := dynamic.NewForConfig(cfg)
	if err != nil {
		out.err = err
		return out
	}
	list, err := c.Resource(apiExports).List(ctx, metav1.ListOptions{ResourceVersion: resourceVersion})
	if err != nil {
		out.err = err
		return out
	}
	out.items = list.Items
	return out
}

// relayGraph says who peers with whom: each cache's peers, both ways.
type relayGraph map[string][]string

// graphOf is the graph of the given edges.
func graphOf(edges ...[2]string) relayGraph {
	g := relayGraph{}
	for _, e := range edges {
		g[e[0]] = append(g[e[0]], e[1])
		g[e[1]] = append(g[e[1]], e[0])
	}
	for _, peers := range g {
		slices.Sort(peers)
	}
	return g
}

func (g relayGraph) peers(from, to string) bool { return slices.Contains(g[from], to) }

// path is a shortest path from one cache to another, both included; nil
// when there is none. In a chain, a star or a tree it is the only one.
func (g relayGraph) path(from, to string) []string {
	prev := map[string]string{from: ""}
	for queue := []string{from}; len(queue) > 0; queue = queue[1:] {
		if queue[0] == to {
			break
		}
		for _, p := range g[queue[0]] {
			if _, seen := prev[p]; !seen {
				prev[p] = queue[0]
				queue = append(queue, p)
			}
		}
	}
	if _, ok := prev[to]; !ok {
		return nil
	}
	var out []string
	for n := to; n != ""; n = prev[n] {
		out = append([]string{n}, out...)
	}
	return out
}

// homePath is the home-path annotation of a copy held at the first cache
// of path, which came along it: the home, then each relay back to that
// cache, not the cache itself.
func homePath(path []string) string {
	back := slices.Clone(path[1:])
	slices.Reverse(back)
	return strings.Join(back, ",")
}

// relayNet is a set of caches peering along the edges of a graph.
type relayNet struct {
	g       relayGraph
	names   []string
	regions map[string]*region
}

// startRelayNet starts a cache per name, each peering only with its
// neighbours in g.
func startRelayNet(t *testing.T, ctx context.Context, g relayGraph, names ...string) *relayNet {
	t.Helper()
	for _, name := range names {
		if len(g[name]) == 0 {
			t.Fatalf("cache %s has no peer in the graph %v", name, g)
		}
	}
	return &relayNet{g: g, names: names, regions: startRegionsWith(t, ctx, nil, g.peers, names...)}
}

// relayShard is a shard's partition as its home acknowledged it.
type relayShard struct {
	name string
	home *region
	// rvs are the resourceVersions of its objects at the home, by name.
	rvs map[string]string
}

// writeShard writes objects of a new shard at its home.
func writeShard(ctx context.Context, t *testing.T, home *region, shard string, names ...string) *relayShard {
	t.Helper()
	s := &relayShard{name: shard, home: home, rvs: map[string]string{}}
	for _, name := range names {
		s.create(ctx, t, name)
	}
	return s
}

// create writes one more object of the shard at its home.
func (s *relayShard) create(ctx context.Context, t *testing.T, name string) {
	t.Helper()
	obj, err := s.home.shard(t, s.name).Create(ctx, apiExport(name, map[string]interface{}{"home": s.home.name}), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("shard %s writing %s at its home %s: %v", s.name, name, s.home.name, err)
	}
	s.rvs[name] = obj.GetResourceVersion()
}

// partitions are the shard's objects as partitionsOf renders them.
func (s *relayShard) partitions() []string {
	out := make([]string, 0, len(s.rvs))
	for name := range s.rvs {
		out = append(out, s.name+"/root/"+name)
	}
	slices.Sort(out)
	return out
}

// checkRelayed reads s at cache at, consistently and (at a cache other
// than its home) stale, and says what is not as it should be: every object
// the home acknowledged, the home (never a relay) named in the headers,
// and on every copy the home's bookkeeping, with path as its home-path.
func checkRelayed(ctx context.Context, at *region, s *relayShard, path string) error {
	return checkServed(ctx, at, s, func(items []unstructured.Unstructured) error {
		return checkBookkeeping(at, s, path, items)
	})
}

// checkServed is checkRelayed with check for the objects of each read
// instead of their bookkeeping; nil checks nothing more.
func checkServed(ctx context.Context, at *region, s *relayShard, check func([]unstructured.Unstructured) error) error {
	if check == nil {
		check = func([]unstructured.Unstructured) error { return nil }
	}
	got := at.read(ctx, s.name, "")
	if got.err != nil {
		return fmt.Errorf("consistent read of %s at %s: %s", s.name, at.name, describe(got.err))
	}
	if names := partitionsOf(got.items); !slices.Equal(names, s.partitions()) {
		return fmt.Errorf("consistent read of %s at %s: %v, want %v", s.name, at.name, names, s.partitions())
	}
	epoch := s.home.srv.Server().Epoch()
	header := got.header.Get(kcpcache.HomeRevisionHeader)
	entries, err := kcpcache.ParseHomeRevisions(header)
	if err != nil || len(entries) != 1 || entries[0].Home != s.home.name || entries[0].Epoch != epoch {
		return fmt.Errorf("consistent read of %s at %s: %s %q (%v), want one entry %s=%s/<revision>", s.name, at.name, kcpcache.HomeRevisionHeader, header, err, s.home.name, epoch)
	}
	if err := check(got.items); err != nil {
		return fmt.Errorf("consistent read: %w", err)
	}
	if at == s.home {
		return nil
	}
	got = at.read(ctx, s.name, "0")
	if got.err != nil {
		return fmt.Errorf("stale read of %s at %s: %s", s.name, at.name, describe(got.err))
	}
	if names := partitionsOf(got.items); !slices.Equal(names, s.partitions()) {
		return fmt.Errorf("stale read of %s at %s: %v, want %v", s.name, at.name, names, s.partitions())
	}
	ages := got.header.Get(kcpcache.FreshnessAgeHeader)
	if named := agesNamed(ages); !slices.Equal(named, []string{s.home.name}) {
		return fmt.Errorf("stale read of %s at %s: %s %q, want one age, of %s", s.name, at.name, kcpcache.FreshnessAgeHeader, ages, s.home.name)
	}
	if header := got.header.Get(kcpcache.HomeRevisionHeader); header != "" {
		entries, err := kcpcache.ParseHomeRevisions(header)
		if err != nil || len(entries) != 1 || entries[0].Home != s.home.name || entries[0].Epoch != epoch {
			return fmt.Errorf("stale read of %s at %s: %s %q (%v), want one entry %s=%s/<revision>", s.name, at.name, kcpcache.HomeRevisionHeader, header, err, s.home.name, epoch)
		}
	}
	if err := check(got.items); err != nil {
		return fmt.Errorf("stale read: %w", err)
	}
	return nil
}

// checkBookkeeping checks the objects of s read at cache at: the home's
// own objects carry no copy bookkeeping; a copy names the home (never a
// relay), the object's resourceVersion at the home, and the path it came
// by.
func checkBookkeeping(at *region, s *relayShard, path string, items []unstructured.Unstructured) error {
	for _, u := range items {
		a := u.GetAnnotations()
		if at == s.home {
			if a[kcpcache.AnnotationHome] != "" || a[kcpcache.AnnotationHomePath] != "" {
				return fmt.Errorf("%s at its home %s has copy bookkeeping: home %q, home-path %q", u.GetName(), at.name, a[kcpcache.AnnotationHome], a[kcpcache.AnnotationHomePath])
			}
			continue
		}
		if a[kcpcache.AnnotationHome] != s.home.name || a[kcpcache.AnnotationHomeResourceVersion] != s.rvs[u.GetName()] || a[kcpcache.AnnotationHomePath] != path {
			return fmt.Errorf("copy of %s/%s at %s: %s %q, %s %q, %s %q; want %q, %q (its resourceVersion at the home), %q",
				s.name, u.GetName(), at.name,
				kcpcache.AnnotationHome, a[kcpcache.AnnotationHome], kcpcache.AnnotationHomeResourceVersion, a[kcpcache.AnnotationHomeResourceVersion], kcpcache.AnnotationHomePath, a[kcpcache.AnnotationHomePath],
				s.home.name, s.rvs[u.GetName()], path)
		}
	}
	return nil
}

// agesNamed returns the names of a FreshnessAgeHeader value, sorted.
func agesNamed(value string) []string {
	var out []string
	for _, part := range strings.Split(value, ",") {
		if name, _, ok := strings.Cut(strings.TrimSpace(part), "="); ok {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// checkWildcard reads every shard at cache at consistently: every object
// of shards, the home-revision header naming each of their homes other
// than at. Every cache is the home of the shards homed there, none
// perhaps, so the header may name any cache, but each in its own epoch:
// the home's revision, never a relay's.
func (n *relayNet) checkWildcard(ctx context.Context, at *region, shards ...*relayShard) error {
	got := at.read(ctx, kcpcache.Wildcard, "")
	if got.err != nil {
		return fmt.Errorf("consistent read of every shard at %s: %s", at.name, describe(got.err))
	}
	var want []string
	homesOf := map[string]bool{}
	for _, s := range shards {
		want = append(want, s.partitions()...)
		homesOf[s.home.name] = true
	}
	slices.Sort(want)
	if names := partitionsOf(got.items); !slices.Equal(names, want) {
		return fmt.Errorf("consistent read of every shard at %s: %v, want %v", at.name, names, want)
	}
	header := got.header.Get(kcpcache.HomeRevisionHeader)
	entries, err := kcpcache.ParseHomeRevisions(header)
	if err != nil {
		return fmt.Errorf("consistent read of every shard at %s: %s %q: %v", at.name, kcpcache.HomeRevisionHeader, header, err)
	}
	named := map[string]bool{}
	for _, e := range entries {
		r := n.regions[e.Home]
		if r == nil || e.Epoch != r.srv.Server().Epoch() {
			return fmt.Errorf("consistent read of every shard at %s: %s %q names %s=%s, not a cache in its epoch", at.name, kcpcache.HomeRevisionHeader, header, e.Home, e.Epoch)
		}
		named[e.Home] = true
	}
	for home := range homesOf {
		if home != at.name && !named[home] {
			return fmt.Errorf("consistent read of every shard at %s: %s %q does not name the home %s", at.name, kcpcache.HomeRevisionHeader, header, home)
		}
	}
	return nil
}

// eventually is cachetest.Eventually that also reports f's last error
// before the poll's deadline cut a request short.
func eventually(t *testing.T, what string, f func(ctx context.Context) error) {
	t.Helper()
	eventuallyWithin(t, what, cachetest.DefaultTimeout, f)
}

// eventuallyWithin is eventually with its own timeout.
func eventuallyWithin(t *testing.T, what string, timeout time.Duration, f func(ctx context.Context) error) {
	t.Helper()
	var last error
	cachetest.EventuallyWithin(t, what, timeout, func(ctx context.Context) error {
		err := f(ctx)
		if err != nil && ctx.Err() != nil && last != nil {
			return fmt.Errorf("%w (before the deadline: %v)", err, last)
		}
		last = err
		return err
	})
}

// waitRoutes waits until every cache's table offers a route to every other
// cache along the graph's shortest path.
func (n *relayNet) waitRoutes(t *testing.T) {
	t.Helper()
	for _, name := range n.names {
		r := n.regions[name]
		eventually(t, name+"'s table routes to every other cache along the graph", func(ctx context.Context) error {
			routes, err := r.routes(ctx)
			if err != nil {
				return err
			}
			for _, home := range n.names {
				if home == name {
					continue
				}
				if want := n.g.path(name, home); !slices.Equal(routes[home].Path, want) {
					return fmt.Errorf("route to %s: %+v, want path %v (all: %+v)", home, routes[home], want, routes)
				}
			}
			return nil
		})
	}
}

// waitRelayed waits until every cache serves every shard, and every shard
// at once (the wildcard), as checkServed and checkWildcard say; then until
// every copy has its bookkeeping (checkRelayed), along the graph's
// shortest path.
func (n *relayNet) waitRelayed(t *testing.T, shards ...*relayShard) {
	t.Helper()
	for _, name := range n.names {
		at := n.regions[name]
		for _, s := range shards {
			eventually(t, fmt.Sprintf("%s serves %s (homed at %s)", at.name, s.name, s.home.name), func(ctx context.Context) error {
				return checkServed(ctx, at, s, nil)
			})
		}
		eventually(t, at.name+" serves every shard", func(ctx context.Context) error {
			return n.checkWildcard(ctx, at, shards...)
		})
	}
	for _, name := range n.names {
		at := n.regions[name]
		for _, s := range shards {
			path := n.g.path(at.name, s.home.name)
			eventually(t, fmt.Sprintf("%s's copies of %s (homed at %s) say they came along %v", at.name, s.name, s.home.name, path), func(ctx context.Context) error {
				return checkRelayed(ctx, at, s, homePath(path))
			})
		}
	}
}

// wantWritesOnlyAtHome checks that the shard's writes are refused (403)
// at every cache but its home.
func (n *relayNet) wantWritesOnlyAtHome(ctx context.Context, t *testing.T, s *relayShard) {
	t.Helper()
	for _, name := range n.names {
		r := n.regions[name]
		if r == s.home {
			continue
		}
		_, err := r.shard(t, s.name).Create(ctx, apiExport("stray-"+name, nil), metav1.CreateOptions{})
		wantStatus(t, fmt.Sprintf("shard %s (homed at %s) writing at %s", s.name, s.home.name, name), err, http.StatusForbidden, "", "")
	}
}

// describe is err with the causes of its Status, if it has any.
func describe(err error) string {
	var status apierrors.APIStatus
	if errors.As(err, &status) && status.Status().Details != nil && len(status.Status().Details.Causes) > 0 {
		return fmt.Sprintf("%v (causes %+v)", err, status.Status().Details.Causes)
	}
	return fmt.Sprint(err)
}

// refusedWith says whether err is a 503 with a cause of reason whose field
// is field and whose message contains message; nil when it is.
func refusedWith(err error, reason, field, message string) error {
	var status apierrors.APIStatus
	if !errors.As(err, &status) || status.Status().Code != http.StatusServiceUnavailable {
		return fmt.Errorf("got %v, want 503", err)
	}
	if d := status.Status().Details; d != nil {
		for _, c := range d.Causes {
			if string(c.Type) == reason && c.Field == field && strings.Contains(c.Message, message) {
				return nil
			}
		}
	}
	return fmt.Errorf("%v: causes %+v, want one %s naming %q with %q in its message", err, status.Status().Details, reason, field, message)
}

// waitRefused waits until a consistent read of shard at cache at answers
// 503 with a cause as refusedWith says; a 200 with fewer than want objects
// on the way fails the test (a consistent read never answers less than
// the home holds).
func waitRefused(t *testing.T, at *region, shard string, want int, reason, field, message string) {
	t.Helper()
	var short string
	eventually(t, fmt.Sprintf("%s refuses consistent reads of %s with %s naming %s (%q)", at.name, shard, reason, field, message), func(ctx context.Context) error {
		got := at.read(ctx, shard, "")
		if got.err == nil {
			if len(got.items) < want {
				short = fmt.Sprintf("a consistent read of %s at %s answered 200 with %d objects, want %d: %v", shard, at.name, len(got.items), want, partitionsOf(got.items))
				return nil
			}
			return fmt.Errorf("answered 200 with its %d objects", len(got.items))
		}
		return refusedWith(got.err, reason, field, message)
	})
	if short != "" {
		t.Fatal(short)
	}
}

// wantStale checks that a stale read of s at cache at answers 200 with
// every object the home acknowledged, its age naming the home.
func wantStale(ctx context.Context, t *testing.T, at *region, s *relayShard) {
	t.Helper()
	got := at.read(ctx, s.name, "0")
	if got.err != nil {
		t.Fatalf("stale read of %s at %s: %v", s.name, at.name, got.err)
	}
	if names := partitionsOf(got.items); !slices.Equal(names, s.partitions()) {
		t.Fatalf("stale read of %s at %s: %v, want %v", s.name, at.name, names, s.partitions())
	}
	if ages := got.header.Get(kcpcache.FreshnessAgeHeader); !slices.Equal(agesNamed(ages), []string{s.home.name}) {
		t.Fatalf("stale read of %s at %s: %s %q, want one age, of %s", s.name, at.name, kcpcache.FreshnessAgeHeader, ages, s.home.name)
	}
}

// TestRelayChainOfThree: east peers west, west peers south; east and south
// do not peer. West relays: every cache serves every shard consistently,
// the headers naming the home, and a copy at east of south's shard says it
// came from south through west. When west is lost east keeps its copies
// (stale reads have every object) and refuses consistent reads naming the
// failed hop east->west; when south is lost, east names west->south.
func TestRelayChainOfThree(t *testing.T) {
	if testing.Short() {
		t.Skip("long scenario (several caches in regions): skipped with -short")
	}
	ctx := testContext(t)
	n := startRelayNet(t, ctx, graphOf([2]string{"east", "west"}, [2]string{"west", "south"}), "east", "west", "south")
	east, west, south := n.regions["east"], n.regions["west"], n.regions["south"]
	var shards []*relayShard
	for _, r := range []*region{east, west, south} {
		shards = append(shards, writeShard(ctx, t, r, "shard-"+r.name, "one", "two", "three"))
	}
	shardEast, shardSouth := shards[0], shards[2]
	n.waitRelayed(t, shards...)
	n.waitRoutes(t)
	// The path is recorded as the brief says it: spelled out once, not
	// only derived from the graph.
	if err := checkRelayed(ctx, east, shardSouth, "south,west"); err != nil {
		t.Fatal(err)
	}
	for _, s := range shards {
		n.wantWritesOnlyAtHome(ctx, t, s)
	}

	// West, the relay, is lost: east and south keep their copies of each
	// other's shard, and refuse consistent reads naming the hop that failed.
	west.stop(t)
	waitRefused(t, east, shardSouth.name, len(shardSouth.rvs), homes.ReasonHomeUnreachable, "south", "east->west")
	waitRefused(t, south, shardEast.name, len(shardEast.rvs), homes.ReasonHomeUnreachable, "east", "south->west")
	wantStale(ctx, t, east, shardSouth)
	wantStale(ctx, t, south, shardEast)
	// Each one's own shard is still read consistently at its home.
	for _, s := range []*relayShard{shardEast, shardSouth} {
		if err := checkRelayed(ctx, s.home, s, ""); err != nil {
			t.Fatalf("with west lost: %v", err)
		}
	}

	// West returns: everything is relayed again.
	west.start(t, ctx)
	n.waitRelayed(t, shards...)

	// South, the home, is lost: east's refusal names the hop beyond west.
	south.stop(t)
	waitRefused(t, east, shardSouth.name, len(shardSouth.rvs), homes.ReasonHomeUnreachable, "south", "west->south")
	wantStale(ctx, t, east, shardSouth)
	wantStale(ctx, t, west, shardSouth)
	if err := checkRelayed(ctx, east, shardEast, ""); err != nil {
		t.Fatalf("with south lost: %v", err)
	}
}

// wantSeenNow checks, right after s's home acknowledged a write, that a
// consistent read of s at cache at answers 200 with it (and every other
// object), as checkRelayed says along path.
func wantSeenNow(ctx context.Context, t *testing.T, at *region, s *relayShard, path string) {
	t.Helper()
	if err := checkRelayed(ctx, at, s, path); err != nil {
		t.Fatalf("right after the home acknowledged a write: %v", err)
	}
}

// wantSeenSoon checks, right after s's home acknowledged a write, that a
// consistent read of s at cache at never answers 200 without it: at once
// 200 with every object, or 503 (the mirror is behind) until it does.
func wantSeenSoon(t *testing.T, at *region, s *relayShard) {
	t.Helper()
	var short string
	eventually(t, fmt.Sprintf("%s serves %s with its home's last write", at.name, s.name), func(ctx context.Context) error {
		got := at.read(ctx, s.name, "")
		if got.err != nil {
			if !apierrors.IsServiceUnavailable(got.err) {
				return fmt.Errorf("consistent read of %s at %s: %s", s.name, at.name, describe(got.err))
			}
			return fmt.Errorf("consistent read of %s at %s: %s (a 503 is allowed while the mirror catches up)", s.name, at.name, describe(got.err))
		}
		if names := partitionsOf(got.items); !slices.Equal(names, s.partitions()) {
			short = fmt.Sprintf("a consistent read of %s at %s after the home acknowledged a write answered 200 with %v, want %v", s.name, at.name, names, s.partitions())
		}
		return nil
	})
	if short != "" {
		t.Fatal(short)
	}
}

// TestRelayStar: leaf-1, leaf-2 and leaf-3 each peer only with root, which
// relays: every leaf serves every other leaf's shard consistently, and a
// write at a leaf is in a consistent read at every other leaf as soon as
// the leaf has acknowledged it.
func TestRelayStar(t *testing.T) {
	if testing.Short() {
		t.Skip("long scenario (several caches in regions): skipped with -short")
	}
	ctx := testContext(t)
	leaves := []string{"leaf-1", "leaf-2", "leaf-3"}
	var edges [][2]string
	for _, leaf := range leaves {
		edges = append(edges, [2]string{"root", leaf})
	}
	n := startRelayNet(t, ctx, graphOf(edges...), append([]string{"root"}, leaves...)...)
	var shards []*relayShard
	for _, leaf := range leaves {
		shards = append(shards, writeShard(ctx, t, n.regions[leaf], "shard-"+leaf, "one", "two"))
	}
	n.waitRelayed(t, shards...)
	n.waitRoutes(t)
	for _, s := range shards {
		n.wantWritesOnlyAtHome(ctx, t, s)
	}
	for _, s := range shards {
		s.create(ctx, t, "late")
		for _, name := range n.names {
			if at := n.regions[name]; at != s.home {
				wantSeenNow(ctx, t, at, s, homePath(n.g.path(name, s.home.name)))
			}
		}
	}
}

// TestRelayTreeOfTwoLevels: global; region-a and region-b peer with it;
// zone-a1 and zone-a2 with region-a, zone-b1 and zone-b2 with region-b.
// Every cache serves every zone's shard consistently, each through the
// only path there is, and a write at zone-a1 reaches zone-b2, four hops
// away, confirmed with zone-a1.
func TestRelayTreeOfTwoLevels(t *testing.T) {
	if testing.Short() {
		t.Skip("long scenario (several caches in regions): skipped with -short")
	}
	ctx := testContext(t)
	g := graphOf(
		[2]string{"global", "region-a"}, [2]string{"global", "region-b"},
		[2]string{"region-a", "zone-a1"}, [2]string{"region-a", "zone-a2"},
		[2]string{"region-b", "zone-b1"}, [2]string{"region-b", "zone-b2"},
	)
	zones := []string{"zone-a1", "zone-a2", "zone-b1", "zone-b2"}
	n := startRelayNet(t, ctx, g, append([]string{"global", "region-a", "region-b"}, zones...)...)
	var shards []*relayShard
	for _, zone := range zones {
		shards = append(shards, writeShard(ctx, t, n.regions[zone], "shard-"+zone, "one", "two"))
	}
	n.waitRelayed(t, shards...)
	n.waitRoutes(t)
	shardA1 := shards[0]
	n.wantWritesOnlyAtHome(ctx, t, shardA1)

	zoneB2 := n.regions["zone-b2"]
	if path := n.g.path("zone-b2", "zone-a1"); len(path) != 5 {
		t.Fatalf("the path from zone-b2 to zone-a1 is %v: not four hops", path)
	}
	shardA1.create(ctx, t, "late")
	wantSeenSoon(t, zoneB2, shardA1)
	if err := checkRelayed(ctx, zoneB2, shardA1, "zone-a1,region-a,global,region-b"); err != nil {
		t.Fatal(err)
	}
}

// TestRelayRingSwitchesPath: a ring a-b-c-d-a, shard-c's objects at c. a
// takes them through b or d (its table says which); that relay is lost.
// a switches to the other path: consistent reads at a answer again within
// 30 s, and meanwhile stale reads at a (every 100 ms) always answer with
// every object and a watch at a sees no DELETED. A write at c then reaches
// a through the other relay.
func TestRelayRingSwitchesPath(t *testing.T) {
	if testing.Short() {
		t.Skip("long scenario (several caches in regions): skipped with -short")
	}
	ctx := testContext(t)
	n := startRelayNet(t, ctx, graphOf([2]string{"a", "b"}, [2]string{"b", "c"}, [2]string{"c", "d"}, [2]string{"d", "a"}), "a", "b", "c", "d")
	a, c := n.regions["a"], n.regions["c"]
	const objects = 20
	var names []string
	for i := range objects {
		names = append(names, fmt.Sprintf("export-%02d", i))
	}
	s := writeShard(ctx, t, c, "shard-c", names...)
	var relay string
	eventually(t, "a's table routes to c through b or d", func(ctx context.Context) error {
		routes, err := a.routes(ctx)
		if err != nil {
			return err
		}
		p := routes["c"].Path
		if len(p) != 3 || p[0] != "a" || p[2] != "c" || (p[1] != "b" && p[1] != "d") {
			return fmt.Errorf("route to c: %+v, want a path a,b,c or a,d,c", routes["c"])
		}
		relay = p[1]
		return nil
	})
	other := map[string]string{"b": "d", "d": "b"}[relay]
	eventually(t, "a serves shard-c through "+relay, func(ctx context.Context) error {
		return checkRelayed(ctx, a, s, "c,"+relay)
	})
	t.Logf("a takes shard-c through %s; %s is stopped, %s is the other path", relay, relay, other)

	// The sampler and the watch run from here until the write after the
	// switch has reached a.
	sampleCtx, stopSampling := context.WithCancel(ctx)
	var (
		mu                     sync.Mutex
		answered               int
		fewer, failed, deleted []string
		watchErrors            []string
		wg                     sync.WaitGroup
	)
	start := time.Now()
	wg.Go(func() {
		ticker := time.NewTicker(100 * time.Millisecond)
		defer ticker.Stop()
		for {
			rctx, cancel := context.WithTimeout(sampleCtx, 10*time.Second)
			got := a.read(rctx, s.name, "0")
			cancel()
			if sampleCtx.Err() != nil {
				return
			}
			mu.Lock()
			switch {
			case got.err != nil:
				failed = append(failed, fmt.Sprintf("%v: %s", time.Since(start), describe(got.err)))
			case len(got.items) < objects:
				fewer = append(fewer, fmt.Sprintf("%v: %d objects: %v", time.Since(start), len(got.items), partitionsOf(got.items)))
			default:
				answered++
			}
			mu.Unlock()
			select {
			case <-sampleCtx.Done():
				return
			case <-ticker.C:
			}
		}
	})
	res := dyn(t, a.srv, s.name, kcpcache.Wildcard).Resource(apiExports)
	list, err := res.List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil || len(list.Items) != objects {
		t.Fatalf("stale list of shard-c at a before the stop: %v, %v", list, err)
	}
	timeout := int64(600)
	w, err := res.Watch(sampleCtx, metav1.ListOptions{ResourceVersion: list.GetResourceVersion(), TimeoutSeconds: &timeout})
	if err != nil {
		t.Fatalf("watching shard-c at a: %v", err)
	}
	const late = "after-the-switch"
	lateAdded := make(chan struct{})
	wg.Go(func() {
		from := list.GetResourceVersion()
		added := false
		for current := w; ; {
			for ev := range current.ResultChan() {
				if ev.Type == watch.Error {
					if sampleCtx.Err() != nil {
						// The end of the watch, not a failure.
						return
					}
					mu.Lock()
					watchErrors = append(watchErrors, fmt.Sprintf("%v: %v", time.Since(start), apierrors.FromObject(ev.Object)))
					mu.Unlock()
					current.Stop()
					return
				}
				m, err := metaOf(ev.Object)
				if err != nil {
					continue
				}
				if m.GetResourceVersion() != "" {
					from = m.GetResourceVersion()
				}
				switch {
				case ev.Type == watch.Deleted:
					mu.Lock()
					deleted = append(deleted, fmt.Sprintf("%s after %v", m.GetName(), time.Since(start)))
					mu.Unlock()
				case ev.Type == watch.Added && m.GetName() == late && !added:
					added = true
					close(lateAdded)
				}
			}
			current.Stop()
			if sampleCtx.Err() != nil {
				return
			}
			// The server ended the watch (its timeout): resume where it
			// was.
			next, err := res.Watch(sampleCtx, metav1.ListOptions{ResourceVersion: from, TimeoutSeconds: &timeout})
			if err != nil {
				if sampleCtx.Err() == nil {
					mu.Lock()
					watchErrors = append(watchErrors, fmt.Sprintf("%v: resuming from %s: %v", time.Since(start), from, err))
					mu.Unlock()
				}
				return
			}
			current = next
		}
	})
	// Judged however the test ends.
	defer func() {
		// Enough samples to judge, however fast the switch was.
		_ = cachetest.PollWithin(ctx, 10*time.Second, func(context.Context) error {
			mu.Lock()
			defer mu.Unlock()
			if answered+len(fewer)+len(failed) < 20 {
				return fmt.Errorf("%d samples", answered+len(fewer)+len(failed))
			}
			return nil
		})
		stopSampling()
		wg.Wait()
		t.Logf("stale reads of shard-c at a from the stop on: %d answered with every object, %d with fewer, %d failed", answered, len(fewer), len(failed))
		if len(fewer) > 0 {
			t.Errorf("stale reads at a answered with fewer than the %d objects c holds: %v", objects, fewer)
		}
		if len(failed) > 0 {
			t.Errorf("stale reads at a failed: %v", failed)
		}
		if answered < 20 {
			t.Errorf("only %d stale reads at a answered: too few to judge", answered)
		}
		if len(deleted) > 0 {
			t.Errorf("the watch at a saw DELETED for objects c holds throughout: %v", deleted)
		}
		if len(watchErrors) > 0 {
			t.Errorf("the watch at a failed: %v", watchErrors)
		}
	}()

	n.regions[relay].stop(t)
	stopped := time.Now()
	eventuallyWithin(t, "a serves shard-c consistently again after "+relay+" stopped", 30*time.Second, func(ctx context.Context) error {
		got := a.read(ctx, s.name, "")
		if got.err != nil {
			return fmt.Errorf("consistent read of shard-c at a: %s", describe(got.err))
		}
		if len(got.items) != objects {
			return fmt.Errorf("consistent read of shard-c at a: %d objects, want %d", len(got.items), objects)
		}
		return nil
	})
	t.Logf("a answered a consistent read of shard-c %v after %s stopped", time.Since(stopped).Round(time.Millisecond), relay)
	eventuallyWithin(t, "a's table routes to c through "+other, 30*time.Second, func(ctx context.Context) error {
		routes, err := a.routes(ctx)
		if err != nil {
			return err
		}
		if want := []string{"a", other, "c"}; !slices.Equal(routes["c"].Path, want) {
			return fmt.Errorf("route to c: %+v, want path %v", routes["c"], want)
		}
		return nil
	})
	eventuallyWithin(t, "a's copies of shard-c came through "+other, 30*time.Second, func(ctx context.Context) error {
		return checkRelayed(ctx, a, s, "c,"+other)
	})

	// c's next write reaches a, through the other relay, and its watch.
	s.create(ctx, t, late)
	wantSeenSoon(t, a, s)
	if err := checkRelayed(ctx, a, s, "c,"+other); err != nil {
		t.Fatal(err)
	}
	select {
	case <-lateAdded:
	case <-time.After(30 * time.Second):
		t.Errorf("the watch at a did not see %s ADDED within 30 s of the consistent read that had it", late)
	}
}

// TestRelayNoRouteIsRefused: a chain a-b-c; a knows shard-c's claim (home
// c) and holds its copies, then restarts while b, its only way to c, is
// down. a has no route to c at all: it refuses consistent reads of shard-c
// (and of every shard) with 503 HomeNoRoute naming c, still serves its
// copies to stale reads, and still refuses shard-c's writes (403). When b
// returns, a serves shard-c consistently again.
func TestRelayNoRouteIsRefused(t *testing.T) {
	if testing.Short() {
		t.Skip("long scenario (several caches in regions): skipped with -short")
	}
	ctx := testContext(t)
	n := startRelayNet(t, ctx, graphOf([2]string{"a", "b"}, [2]string{"b", "c"}), "a", "b", "c")
	a, b, c := n.regions["a"], n.regions["b"], n.regions["c"]
	s := writeShard(ctx, t, c, "shard-c", "one", "two", "three")
	eventually(t, "a serves shard-c through b", func(ctx context.Context) error {
		return checkServed(ctx, a, s, nil)
	})
	_, err := a.shard(t, s.name).Create(ctx, apiExport("stray", nil), metav1.CreateOptions{})
	wantStatus(t, "shard-c writing at a", err, http.StatusForbidden, "", "")

	b.stop(t)
	a.stop(t)
	a.start(t, ctx)
	waitRefused(t, a, s.name, len(s.rvs), mirror.ReasonHomeNoRoute, "c", "")
	if err := refusedWith(a.read(ctx, kcpcache.Wildcard, "").err, mirror.ReasonHomeNoRoute, "c", ""); err != nil {
		t.Fatalf("consistent read of every shard at a, without a route to c: %v", err)
	}
	got := a.read(ctx, s.name, "0")
	if got.err != nil || !slices.Equal(partitionsOf(got.items), s.partitions()) {
		t.Fatalf("stale read of shard-c at a, without a route to c: %v, %s; want %v", partitionsOf(got.items), describe(got.err), s.partitions())
	}
	_, err = a.shard(t, s.name).Create(ctx, apiExport("stray", nil), metav1.CreateOptions{})
	wantStatus(t, "shard-c writing at a, without a route to c", err, http.StatusForbidden, "", "")

	b.start(t, ctx)
	eventually(t, "a serves shard-c through b again", func(ctx context.Context) error {
		return checkRelayed(ctx, a, s, "c,b")
	})
}
