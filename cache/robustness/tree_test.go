package robustness

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/client"
	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
)

// The tree shape: six caches that do not all peer with each other, so
// that what a cache serves of a home it does not peer with comes through
// relays (cache/server/homes/routes.go, cache/server/mirror/relay.go):
//
//	       g
//	     /   \
//	   r1     r2
//	  /  \      \
//	l1    l2 --- l3
//
// g is the root, r1 and r2 relays peering with it, l1 and l2 leaves under
// r1, l3 a leaf under r2; each leaf peers with its relay, and the extra
// link l2-l3 closes a ring g-r1-l2-l3-r2, so that some cuts leave another
// path (g-r1, r1-l2, r2-l3, and g-r2) and one never does (r1-l1: l1 is
// then alone). With l2-l3 cut too, the shape is a tree proper and a cut of
// g-r1 divides it in two. Every link goes through a LinkCutter, both
// directions through one.
var (
	treeNames = []string{"g", "r1", "r2", "l1", "l2", "l3"}
	treeEdges = [][2]string{{"g", "r1"}, {"g", "r2"}, {"r1", "l1"}, {"r1", "l2"}, {"r2", "l3"}, {"l2", "l3"}}
	// treeShards are the shards and their homes, in the order of the
	// shape's partitions: at the root and at a leaf under each relay.
	treeShards = [][2]string{{"sg", "g"}, {"sl1", "l1"}, {"sl3", "l3"}}
)

// treeReachWithin bounds the time after a fault within which every cache
// that has a path to a shard's home open answers a consistent read of it:
// a lost hop withdraws its routes within about three table polls (6 s) a
// hop, and a mirror that changes its upstream lists every type again.
const treeReachWithin = time.Minute

// treeCutOffSlack is how much more than the freshness wait a cache that
// has no path open to a shard's home may take to refuse a consistent read
// of it.
const treeCutOffSlack = 5 * time.Second

// tree is the tree shape's caches and links, and the faults' own checks.
type tree struct {
	regions map[string]*cachetest.Region
	// links are the link cutters by pair ("g-r1").
	links map[string]*cachetest.LinkCutter
	// proxies stand in front of each cache with its admin's identity: the
	// traffic's reads at the caches other than a shard's home and the
	// faults' probes go through them (a seeded fault there is seen by
	// both).
	proxies map[string]*Proxy
	found   func(Violation)
	// dump writes the test binary's goroutines beside the saved
	// histories.
	dump func(what string)

	mu  sync.Mutex
	cut map[string]bool
	// blind names the caches restarted while they had no path open to
	// a home, with that home ("l1>g"), until a path is open again: a
	// cache learns how long ago a home confirmed its copy from the home,
	// and after a restart without a path it has not heard from it.
	blind map[string]bool
	// dumped is set once the goroutines were written for a stale read
	// that did not answer.
	dumped bool
}

// linkName names the link between two caches: both directions go through
// one.
func linkName(x, y string) string {
	if x > y {
		x, y = y, x
	}
	return x + "-" + y
}

// startTree is the tree shape: a shard homed at g, at l1 and at l3, each
// written at its home and read consistently at every cache at random (its
// home and the five others, at every depth), with resourceVersion=0 at the
// five others (each writer a reader moving between them with one memory of
// the home revisions it accepted); a watcher at each home. With faults,
// the shape's faults in turn (tree.faults), and after the traffic l3 is
// restored from its backup.
func startTree(t *testing.T, withFaults bool) (*cluster, *tree) {
	t.Helper()
	ctx, cancel := context.WithTimeout(klog.NewContext(context.Background(), klog.Background()), 3*cachetest.DefaultTimeout)
	defer cancel()
	tr := &tree{links: map[string]*cachetest.LinkCutter{}, proxies: map[string]*Proxy{}, cut: map[string]bool{}, blind: map[string]bool{}}
	peers := map[string]bool{}
	for _, e := range treeEdges {
		tr.links[linkName(e[0], e[1])] = cachetest.NewLinkCutter()
		peers[e[0]+">"+e[1]], peers[e[1]+">"+e[0]] = true, true
	}
	tr.regions = cachetest.StartRegions(t, ctx, cachetest.RegionsOptions{
		Via:       func(from, to, host string) string { return tr.links[linkName(from, to)].Via(t, host) },
		PeersWith: func(from, to string) bool { return peers[from+">"+to] },
	}, treeNames...)
	for _, name := range treeNames {
		tr.proxies[name] = memberProxy(t, tr.regions[name].Srv.Config())
	}
	c := &cluster{srv: tr.regions["g"].Srv}
	tr.found = c.findings.add
	tr.dump = func(what string) { dumpGoroutines(t, what) }
	for _, sh := range treeShards {
		shard, home := sh[0], sh[1]
		p := partitionAt(t, tr.regions[home].Srv, shard)
		consistentAt, staleAt := []string{home}, []string{}
		for _, other := range treeNames {
			if other == home {
				continue
			}
			p.readers = append(p.readers, proxiedReader(t, tr.proxies[other], shard, p.answers))
			staleCfg := AskBookkeeping(&rest.Config{Host: tr.proxies[other].URL + kcpcache.ScopedPathPrefix(kcpcache.Scope{Shard: shard, Cluster: "root"})})
			staleCfg.Wrap(p.answers.Wrap)
			stale, err := NewStaleReader(client.Unthrottled(staleCfg), home, nil)
			if err != nil {
				t.Fatal(err)
			}
			p.stale = append(p.stale, stale)
			consistentAt, staleAt = append(consistentAt, other), append(staleAt, other)
		}
		// A violation names a cache by its number in the history.
		t.Logf("shard %s (home %s): consistent reads at cache 0..%d = %v; stale reads at cache 1..%d = %v", shard, home, len(consistentAt)-1, consistentAt, len(staleAt), staleAt)
		c.parts = append(c.parts, p)
	}
	if !withFaults {
		return c, tr
	}
	backup := &homeBackup{dir: t.TempDir()}
	c.faultList = tr.faults(t, backup)
	links := make([]*cachetest.LinkCutter, 0, len(tr.links))
	for _, l := range tr.links {
		links = append(links, l)
	}
	c.afterTraffic = backup.restoreAndCheck(tr.regions, "l3", "sl3", links)
	// CI's run (the default duration) gets more time for the first
	// faults: the cut of g-r1 waits for the caches below r1 to take every
	// shard along the other path, and the restore of g-r1 for them to come
	// back.
	c.defaultExtra = 16 * time.Second
	return c, tr
}

// faults are the tree shape's faults, in the order that CI's run meets the
// first of them: a backup of the leaf home l3 (restored after the traffic),
// a cut of g-r1 with another path open (through l2-l3-r2), a restart of
// r2, the relay on that other path, and the link restored. Then the tree
// proper (l2-l3 cut): a leaf cut off from its relay, with no other path,
// and restarted meanwhile; g-r1 cut with no other path, and r1 restarted
// meanwhile; r2-l3 cut with another path open again, and the root
// restarted meanwhile; writes of a shard at caches that are not its home,
// and compactions at homes and relays.
func (tr *tree) faults(t *testing.T, backup *homeBackup) []fault {
	t.Helper()
	srv := func(name string) *cachetest.Server { return tr.regions[name].Srv }
	return []fault{
		tr.restarted("l3", backup.of("l3", srv("l3")), "a backup of l3"),
		tr.cutOf("g-r1"),
		tr.restarted("r2", restartOf("r2 (a relay, on the other path to g)", srv("r2")), "a restart of r2"),
		tr.restoreOf("g-r1"),
		tr.cutOf("l2-l3"),
		tr.cutOf("l1-r1"),
		tr.restarted("l1", restartOf("l1 (a leaf home, cut off)", srv("l1")), "a restart of l1"),
		tr.restoreOf("l1-r1"),
		tr.cutOf("g-r1"),
		tr.restarted("r1", restartOf("r1 (a relay, cut off from g)", srv("r1")), "a restart of r1"),
		tr.restoreOf("g-r1"),
		tr.restoreOf("l2-l3"),
		tr.cutOf("l3-r2"),
		tr.restarted("g", restartOf("g (the root home)", srv("g")), "a restart of g"),
		tr.restoreOf("l3-r2"),
		strayWriteOf(t, srv("l2"), "l2", "sl1"),
		compactionOf(srv("l1").EtcdClient),
		strayWriteOf(t, srv("l3"), "l3", "sg"),
		compactionOf(srv("r1").EtcdClient),
		strayWriteOf(t, srv("r2"), "r2", "sl3"),
		compactionOf(srv("g").EtcdClient),
		tr.restarted("r1", restartOf("r1 (a relay)", srv("r1")), "a restart of r1"),
		compactionOf(srv("l3").EtcdClient),
	}
}

// cutOf cuts a link and checks what every cache serves then (reach).
func (tr *tree) cutOf(link string) fault {
	return func(runCtx context.Context, _ *testing.T, note func(string)) {
		// A fault begun is carried through, and its checks with it, even
		// when the traffic ends meanwhile.
		ctx := context.WithoutCancel(runCtx)
		tr.mu.Lock()
		tr.cut[link] = true
		tr.mu.Unlock()
		other := "no other path"
		if tr.connected(linkEnds(link)) {
			other = "another path open"
		}
		note(fmt.Sprintf("link %s cut (%s; cut now: %s)", link, other, tr.cutNow()))
		tr.links[link].Cut()
		tr.reach(ctx, "link "+link+" cut", note)
	}
}

// restoreOf restores a link and checks what every cache serves then.
func (tr *tree) restoreOf(link string) fault {
	return func(runCtx context.Context, _ *testing.T, note func(string)) {
		ctx := context.WithoutCancel(runCtx)
		tr.mu.Lock()
		delete(tr.cut, link)
		tr.mu.Unlock()
		note(fmt.Sprintf("link %s restored (cut now: %s)", link, tr.cutNow()))
		tr.links[link].Restore()
		tr.reach(ctx, "link "+link+" restored", note)
	}
}

// restarted is f, a fault that restarts the cache name, then the check of
// what every cache serves.
func (tr *tree) restarted(name string, f fault, what string) fault {
	return func(runCtx context.Context, t *testing.T, note func(string)) {
		f(runCtx, t, note)
		for _, sh := range treeShards {
			if home := sh[1]; !tr.connected(name, home) {
				tr.mu.Lock()
				tr.blind[name+">"+home] = true
				tr.mu.Unlock()
			}
		}
		tr.reach(context.WithoutCancel(runCtx), what, note)
	}
}

func linkEnds(link string) (string, string) {
	x, y, _ := strings.Cut(link, "-")
	return x, y
}

// cutNow names the links cut now.
func (tr *tree) cutNow() string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if len(tr.cut) == 0 {
		return "none"
	}
	var out []string
	for l := range tr.cut {
		out = append(out, l)
	}
	slices.Sort(out)
	return strings.Join(out, ", ")
}

// connected says whether a path of links not cut joins caches x and y.
func (tr *tree) connected(x, y string) bool {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	seen := map[string]bool{x: true}
	for queue := []string{x}; len(queue) > 0; queue = queue[1:] {
		for _, e := range treeEdges {
			for _, end := range [][2]string{{e[0], e[1]}, {e[1], e[0]}} {
				if end[0] == queue[0] && !seen[end[1]] && !tr.cut[linkName(e[0], e[1])] {
					seen[end[1]] = true
					queue = append(queue, end[1])
				}
			}
		}
	}
	return seen[y]
}

// reach checks, right after a fault, what each cache serves of each shard
// with the links cut now, all at once, and notes how long it took:
//
//   - tree-reach: a cache that has a path of links not cut to the shard's
//     home answers a consistent read of the shard's partition with 200
//     within treeReachWithin (it takes the shard along a path that is
//     open, however many hops);
//   - tree-cut-off: a cache that has none answers a consistent read
//     (sent after the cut) with 503 within the freshness wait and
//     treeCutOffSlack, never with 200 (nothing confirms its copy), and a
//     read with resourceVersion=0 with 200 and the home's age (its copy
//     is kept and served); without the age when it restarted since it
//     last had a path to the home (what it knew of the home's
//     confirmations was in its memory).
//
// A 500 of either is a violation too.
func (tr *tree) reach(ctx context.Context, after string, note func(string)) {
	start := time.Now()
	var (
		wg              sync.WaitGroup
		mu              sync.Mutex
		slowest         time.Duration
		slowestAt       string
		served, refused int
	)
	for _, name := range treeNames {
		for _, sh := range treeShards {
			shard, home := sh[0], sh[1]
			open := tr.connected(name, home)
			tr.mu.Lock()
			blind := tr.blind[name+">"+home]
			if open {
				delete(tr.blind, name+">"+home)
			}
			tr.mu.Unlock()
			wg.Go(func() {
				if !open {
					tr.wantRefused(ctx, after, start, name, shard, home, blind)
					mu.Lock()
					refused++
					mu.Unlock()
					return
				}
				tr.wantServed(ctx, after, start, name, shard, home)
				mu.Lock()
				defer mu.Unlock()
				served++
				if took := time.Since(start); took > slowest {
					slowest, slowestAt = took, shard+" at "+name
				}
			})
		}
	}
	wg.Wait()
	note(fmt.Sprintf("after %s: %d reads of a shard at a cache with a path open to its home, answered within %s (the last: %s); %d without one", after, served, slowest.Round(time.Millisecond), slowestAt, refused))
}

// wantServed waits for a consistent read of shard at cache name to answer
// 200.
func (tr *tree) wantServed(ctx context.Context, after string, start time.Time, name, shard, home string) {
	var last memberProbe
	err := waitFor(ctx, treeReachWithin-time.Since(start), func(ctx context.Context) error {
		last = tr.probe(ctx, after, name, shard, false)
		if last.err != nil || last.code != http.StatusOK {
			return fmt.Errorf("answered %s", last)
		}
		return nil
	})
	if err != nil {
		tr.found(Violation{Check: "tree-reach", Details: fmt.Sprintf("after %s (cut now: %s), %s has a path open to %s, the home of %s, and did not answer a consistent read of it with 200 within %s: last %v", after, tr.cutNow(), name, home, shard, treeReachWithin, err)})
	}
}

// wantRefused checks that a consistent read of shard at cache name,
// which has no path open to home, is refused with 503 in time and never
// answered 200, and that a stale read is answered with the copy and the
// home's age; blind: name restarted since it last had a path to home,
// and its answer need not have the age.
func (tr *tree) wantRefused(ctx context.Context, after string, start time.Time, name, shard, home string, blind bool) {
	within := freshnessWait + treeCutOffSlack
	var last memberProbe
	refused := false
	for !refused && time.Since(start) < within {
		sent := time.Now()
		last = tr.probe(ctx, after, name, shard, false)
		switch {
		case last.err == nil && last.code == http.StatusOK:
			tr.found(Violation{Check: "tree-cut-off", Details: fmt.Sprintf("after %s (cut now: %s), %s has no path open to %s, the home of %s, and answered a consistent read of it sent %s after the fault with 200 (%s): nothing could confirm its copy", after, tr.cutNow(), name, home, shard, sent.Sub(start).Round(time.Millisecond), last)})
			return
		case last.err == nil && last.code == http.StatusServiceUnavailable:
			refused = true
		default:
			// The cache restarting (connection refused): again.
			pause(ctx)
		}
	}
	if !refused {
		tr.found(Violation{Check: "tree-cut-off", Details: fmt.Sprintf("after %s (cut now: %s), %s has no path open to %s, the home of %s, and did not refuse a consistent read of it with 503 within %s: last %s", after, tr.cutNow(), name, home, shard, within, last)})
		return
	}
	var hung bool
	err := waitFor(ctx, within, func(ctx context.Context) error {
		sent := time.Now()
		stale := tr.probe(ctx, after, name, shard, true)
		took := time.Since(sent).Round(time.Millisecond)
		hung = stale.err != nil && ctx.Err() != nil
		switch {
		case stale.err != nil || stale.code != http.StatusOK:
			return fmt.Errorf("answered after %s: %s; want 200", took, stale)
		case !blind && !strings.HasPrefix(stale.age, home+"="):
			return fmt.Errorf("answered after %s: %s; want 200 with %s %s=<seconds>", took, stale, kcpcache.FreshnessAgeHeader, home)
		}
		return nil
	})
	if err != nil {
		tr.found(Violation{Check: "tree-cut-off", Details: fmt.Sprintf("after %s (cut now: %s), %s has no path open to %s, the home of %s, and a read of it with resourceVersion=0 %v", after, tr.cutNow(), name, home, shard, err)})
		tr.mu.Lock()
		dump := hung && !tr.dumped
		tr.dumped = tr.dumped || dump
		tr.mu.Unlock()
		if dump && tr.dump != nil {
			// The caches run in this process: their goroutines say what
			// the read waits on.
			tr.dump("stale-read-" + name + "-" + shard)
		}
	}
}

// probe lists shard's partition at cache name through its proxy:
// consistently, or with resourceVersion=0. A 500 is a violation.
func (tr *tree) probe(ctx context.Context, after, name, shard string, stale bool) memberProbe {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	u := tr.proxies[name].URL + kcpcache.ScopedPathPrefix(kcpcache.Scope{Shard: shard, Cluster: "root"}) + "/apis/" + Resource.Group + "/" + Resource.Version + "/" + Resource.Resource
	if stale {
		u += "?resourceVersion=0"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return memberProbe{err: err}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return memberProbe{err: err}
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxStatusBytes))
	p := memberProbe{code: resp.StatusCode, age: resp.Header.Get(kcpcache.FreshnessAgeHeader), homeRevision: resp.Header.Get(kcpcache.HomeRevisionHeader)}
	if resp.StatusCode != http.StatusOK {
		var status struct {
			Message string `json:"message"`
		}
		p.message = string(body)
		if json.Unmarshal(body, &status) == nil && status.Message != "" {
			p.message = status.Message
		}
	}
	if resp.StatusCode == http.StatusInternalServerError {
		tr.found(Violation{Check: "internal-error", Details: fmt.Sprintf("after %s, a read of %s at %s (resourceVersion=0: %t) answered %s", after, shard, name, stale, p)})
	}
	return p
}

// TestRobustnessTree: traffic of a shard homed at the root g and at the
// leaves l1 and l3 of a tree of six caches (with one extra link, l2-l3),
// every cache reading every shard, most through relays, while links
// between a relay and its parent or child are cut (with and without
// another path open), relays and homes restart, l3 is backed up, shards
// write at caches that are not their homes and etcds compact; after the
// traffic l3 is restored from its backup. Consistent reads at any cache
// are linearizable with each home's writes, stale reads hold what their
// headers say and never travel back in time for a reader moving between
// caches, each home's watch holds every promise, and after each cut,
// restore or restart every cache with a path open to a home serves its
// shard, and every other refuses it and keeps its copy.
func TestRobustnessTree(t *testing.T) {
	if testing.Short() {
		t.Skip("long scenario (six caches in a tree): skipped with -short")
	}
	c, _ := startTree(t, true)
	runShape(t, "tree", c, func(rep Report) int { return min(rep.MirrorReads, rep.StaleReads) })
}

// TestSeededTreeFaultIsCaught: in the tree shape without faults, r1, a
// relay, serves an old copy as current (RelayServesOldCopy, in the proxy
// through which the traffic reads it): its consistent reads are named by
// linearizability, its stale reads by stale-revision.
func TestSeededTreeFaultIsCaught(t *testing.T) {
	if testing.Short() {
		t.Skip("long scenario (six caches in a tree): skipped with -short")
	}
	c, tr := startTree(t, false)
	tr.proxies["r1"].Enable(RelayServesOldCopy)
	rep := c.run(t, 5*time.Second, nil)
	logReport(t, string(RelayServesOldCopy), rep)
	var checks []string
	for _, v := range rep.Violations {
		checks = append(checks, v.Check)
	}
	for _, want := range []string{"linearizability", "stale-revision"} {
		if !slices.Contains(checks, want) {
			t.Errorf("seeded fault %s: violations %v, want one of %s", RelayServesOldCopy, checks, want)
		}
	}
}
