package robustness

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/client"
	"github.com/kcp-cache/kcp-cache/cache/options"
	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
	"github.com/kcp-cache/kcp-cache/cache/server/embeddedetcd/etcdtest"
)

var (
	duration = flag.Duration("robustness.duration", 8*time.Second, "how long traffic runs per cluster shape (the long run: 10m)")
	faultGap = flag.Duration("robustness.fault-interval", 3*time.Second, "time between injected faults")
	saveDir  = flag.String("robustness.save-dir", "", "where a failing history is saved as JSON (default: the test's temporary directory, printed)")
	replay   = flag.String("robustness.history", "", "a saved history for TestCheckSavedHistory to check again")
	// processSeeded: CI's time budget leaves no room for more caches in
	// child processes.
	processSeeded = flag.Bool("robustness.process-seeded", false, "also run TestSeededGroupFaultsAreCaught, TestSeededPausedHomeIsCaught and TestFullDiskWithoutTheGuardEndsTheCache (caches in child processes, about two minutes)")
)

// cluster is a cluster shape: caches, one partition (shard) or more
// written through its home, and the faults injected while traffic runs.
type cluster struct {
	// srv is the first partition's home.
	srv   *cachetest.Server
	parts []*partition
	// faultList are the shape's faults, injected in turn.
	faultList []fault
	// afterTraffic, when set, is the shape's last step, once the traffic
	// and the watches ended and every key was read: a fault whose
	// outcome is checked on its own (the histories end before it).
	afterTraffic func(ctx context.Context, t *testing.T, note func(string)) []Violation
	// findings are what the faults' own checks found while traffic ran.
	findings findings
	// defaultExtra lengthens a run of the default duration (CI's) for
	// the shape's slower faults.
	defaultExtra time.Duration
	// keyPrefix names the traffic's keys (Traffic.KeyPrefix).
	keyPrefix string
}

// partition is one shard's partition in a shape: written and watched at
// its home through a proxy with the shard's identity that can inject
// seeded faults, and read at the caches in readers (the home alone, or the
// home and its mirrors; the home first).
type partition struct {
	shard   string
	proxy   *Proxy
	client  dynamic.ResourceInterface
	readers []dynamic.ResourceInterface
	// stale read the partition with resourceVersion=0 at its mirrors.
	stale []*StaleReader
	// answers watches the answers to every client above.
	answers *Answers
	// spaces, when set, place the revisions of a partition whose home
	// moves (spaces.go).
	spaces *HomeSpaces
	// gate, when set, holds the writes while the shape moves the
	// partition's home; rec is the partition's history in the run.
	gate *MoveGate
	rec  *Recorder
}

func startOneCache(t *testing.T) *cluster {
	t.Helper()
	c := homedAt(t, cachetest.StartServer(t), "s")
	c.faultList = []fault{restartOf("the cache server", c.srv), compactionOf(c.srv.EtcdClient)}
	return c
}

// startExternalEtcd is the scaled-out shape: two cache servers storing in
// one external etcd cluster of three members, the writers going through
// the first and reading from either at random (a consistent read at the
// second holds every write the first acknowledged, as both read the same
// etcd). Faults: a member's crash and its return, a restart of the first
// cache, a compaction.
func startExternalEtcd(t *testing.T) *cluster {
	t.Helper()
	const members = 3
	etcdCluster := cachetest.StartEtcdCluster(t, members)
	c := homedAt(t, cachetest.StartServer(t, cachetest.WithFlags(etcdCluster.Flags)), "s")
	c.readAlsoAt(t, cachetest.StartServer(t, cachetest.WithFlags(etcdCluster.Flags)))
	etcd := etcdCluster.Client(t)
	kill, restart := memberFaults(etcdCluster, members)
	c.faultList = []fault{kill, restart, restartOf("the first cache server", c.srv), compactionOf(func() *clientv3.Client { return etcd })}
	return c
}

// startMemoryGroup is the in-memory group shape: three --storage=memory
// servers of one group, the writers going through m0 and reading from any
// member at random (a consistent read at any member is a quorum read of
// the group). Each runs in a child process, so that it can be paused, and
// links stand between them, so that the group can be cut in parts.
// Faults: each member in turn restarts, its memory gone, and refills from
// its peers; the leader paused (SIGSTOP, then SIGCONT), a follower, and
// m0, through which the shard writes; a member cut off from the two
// others, then m0, then every link cut, each healed; a compaction.
func startMemoryGroup(t *testing.T) (*cluster, *group) {
	t.Helper()
	return groupShape(t, startGroup(t), "s")
}

// startGroup starts the memory-group shape's group: three members, each in
// a child process, with links between them.
func startGroup(t *testing.T) *cachetest.MemoryGroup {
	t.Helper()
	return cachetest.StartMemoryGroupWith(t, cachetest.GroupOptions{Members: 3, Processes: 3, Links: true})
}

// groupShape is the memory-group shape on mg, for shard's partition.
func groupShape(t *testing.T, mg *cachetest.MemoryGroup, shard string) (*cluster, *group) {
	t.Helper()
	m0 := mg.Processes[0]
	c := &cluster{parts: []*partition{partitionWith(t, m0.ShardConfig(t, shard), shard)}}
	g := &group{MemoryGroup: mg, etcd: etcdtest.Dial(t, mg.EtcdClientTLS(t), mg.ClientURLs...), shard: shard, long: *duration > time.Minute, found: c.findings.add}
	// m0's reads go through the partition's own proxy, with the shard's
	// identity; the others' through a proxy of their own.
	g.members = append(g.members, &groupMember{name: "m0", proxy: c.parts[0].proxy, proc: m0, etcd: dialMember(t, mg, 0)})
	for i, p := range mg.Processes[1:] {
		cfg, err := p.Config()
		if err != nil {
			t.Fatal(err)
		}
		m := &groupMember{name: p.Name, proxy: memberProxy(t, cfg), proc: p, etcd: dialMember(t, mg, i+1)}
		g.members = append(g.members, m)
		c.parts[0].readers = append(c.parts[0].readers, proxiedReader(t, m.proxy, shard, c.parts[0].answers))
	}
	// As an operator's rolling restart does, a member restarts only once
	// the group is whole again (restartOfMember): a group of three with
	// two members not in service has no majority, and an in-memory group
	// without one has lost its data by design. In the order a run of CI's
	// length meets them first: a pause of the leader, a minority cut, a
	// restart.
	// CI's run (the default duration) gets 8 s more for them: a pause
	// lasts 4 s, a cut until its checks pass.
	c.defaultExtra = 8 * time.Second
	c.faultList = []fault{
		g.pauseOf("leader"),
		g.partitionOf("a minority cut", "m2"),
		g.restartOfMember(g.members[1]),
		g.restartOfMember(g.members[2]),
		g.pauseOf("follower"),
		g.pauseOf("m0"),
		g.partitionOf("a minority cut of the member written through", "m0"),
		g.partitionOf("a majority cut (no majority anywhere)", "m0", "m1", "m2"),
		g.restartOfMember(g.members[0]),
		compactionOf(func() *clientv3.Client { return g.etcd }),
	}
	return c, g
}

// groupWhole polls, for up to a minute, until every member of the group is
// started and answers for itself with the same leader and a raft index
// within 100 entries of the leader's.
func groupWhole(ctx context.Context, etcd *clientv3.Client, clientURLs []string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var last error
	for {
		last = func() error {
			members, err := etcd.MemberList(ctx)
			if err != nil {
				return err
			}
			if len(members.Members) != len(clientURLs) {
				return fmt.Errorf("%d members, want %d", len(members.Members), len(clientURLs))
			}
			for _, m := range members.Members {
				if m.Name == "" {
					return fmt.Errorf("member %x has not started", m.ID)
				}
			}
			var leader, top uint64
			indexes := map[string]uint64{}
			for _, u := range clientURLs {
				st, err := etcd.Status(ctx, u)
				if err != nil {
					return fmt.Errorf("status of %s: %w", u, err)
				}
				if leader != 0 && st.Leader != leader {
					return fmt.Errorf("members disagree on the leader")
				}
				leader = st.Leader
				indexes[u] = st.RaftIndex
				top = max(top, st.RaftIndex)
			}
			for u, i := range indexes {
				if top-i > 100 {
					return fmt.Errorf("%s is %d entries behind", u, top-i)
				}
			}
			return nil
		}()
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return last
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// readAlsoAt adds the caches srvs as readers of the first partition.
func (c *cluster) readAlsoAt(t *testing.T, srvs ...*cachetest.Server) {
	t.Helper()
	for _, srv := range srvs {
		c.parts[0].readers = append(c.parts[0].readers, scopedReader(t, srv, c.parts[0].shard, c.parts[0].answers))
	}
}

// scopedConfig is srv's admin's, scoped to shard's partition.
func scopedConfig(srv *cachetest.Server, shard string) *rest.Config {
	cfg := srv.Config()
	cfg.Host += kcpcache.ScopedPathPrefix(kcpcache.Scope{Shard: shard, Cluster: "root"})
	return AskBookkeeping(cfg)
}

// scopedReader reads shard's partition at srv as its admin, its answers
// watched by answers.
func scopedReader(t *testing.T, srv *cachetest.Server, shard string, answers *Answers) dynamic.ResourceInterface {
	t.Helper()
	cfg := scopedConfig(srv, shard)
	cfg.Wrap(answers.Wrap)
	d, err := dynamic.NewForConfig(client.Unthrottled(cfg))
	if err != nil {
		t.Fatal(err)
	}
	return d.Resource(Resource)
}

// startRegions is the regions shape: three caches a, b and c in a full
// mesh, a shard homed at each (sa at a, sb at b, sc at c), every shard
// read consistently at all three at random (a consistent read at a mirror
// is confirmed with the home). Faults: each link between two caches cut
// and restored in turn, with a restart of the third cache meanwhile; a
// shard's write at a cache that is not its home; a compaction at each; sa's
// home moved from a to b, and (a long run gets there) back to a. A long
// run adds d, the home of sd, in a child process, and pauses it.
func startRegions(t *testing.T) *cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(klog.NewContext(context.Background(), klog.Background()), 3*cachetest.DefaultTimeout)
	defer cancel()
	names := []string{"a", "b", "c"}
	// Both directions between two caches go through one link.
	pair := func(x, y string) string {
		if x > y {
			x, y = y, x
		}
		return x + "-" + y
	}
	links := map[string]*cachetest.LinkCutter{"a-b": cachetest.NewLinkCutter(), "b-c": cachetest.NewLinkCutter(), "a-c": cachetest.NewLinkCutter()}
	// A long run has a fourth cache, d, in a child process, the home of
	// sd alone, which its fault pauses: CI's run has no time for a fourth
	// cache.
	var processes []string
	if flagSet("robustness.duration") {
		processes = []string{"d"}
		for _, l := range []string{"a-d", "b-d", "c-d"} {
			links[l] = cachetest.NewLinkCutter()
		}
	}
	via := func(from, to, host string) string { return links[pair(from, to)].Via(t, host) }
	all := cachetest.StartRegions(t, ctx, cachetest.RegionsOptions{Via: via, Processes: processes}, append(slices.Clone(names), processes...)...)
	// The faults below act on a, b and c, which run here.
	regions := maps.Clone(all)
	for _, name := range processes {
		delete(regions, name)
	}
	c := &cluster{srv: regions["a"].Srv}
	for _, home := range names {
		p := partitionAt(t, regions[home].Srv, "s"+home)
		if home == "a" {
			// sa's home moves (homeMoveOf).
			p.spaces, p.gate = NewHomeSpaces(home), NewMoveGate(home)
		}
		for _, other := range names {
			if other != home || home == "a" {
				p.readers = append(p.readers, scopedReader(t, regions[other].Srv, p.shard, p.answers))
				staleCfg := scopedConfig(regions[other].Srv, p.shard)
				staleCfg.Wrap(p.answers.Wrap)
				fixed := home
				if p.spaces != nil {
					// sa's home moves: the spaces know its homes.
					fixed = ""
				}
				stale, err := NewStaleReader(client.Unthrottled(staleCfg), fixed, p.spaces)
				if err != nil {
					t.Fatal(err)
				}
				p.stale = append(p.stale, stale)
			}
		}
		c.parts = append(c.parts, p)
	}
	// c's etcd is backed up first (the short run gets to it), and c is
	// restored from the latest backup once the traffic ends.
	backup := &homeBackup{dir: t.TempDir()}
	c.faultList = append(c.faultList, backup.of("c", regions["c"].Srv))
	c.faultList = append(c.faultList, homeMoveOf(t, c.parts[0], regions, "a", "b"))
	c.afterTraffic = backup.restoreAndCheck(regions, "c", "sc", []*cachetest.LinkCutter{links["a-b"], links["b-c"], links["a-c"]})
	if len(processes) > 0 {
		// d is paused after the backup and the first move.
		c.faultList = append(c.faultList, pausedHomeAt(t, c, all["d"], "sd", regions).pauseOfHome())
	}
	for _, l := range []struct{ link, third string }{{"a-b", "c"}, {"b-c", "a"}, {"a-c", "b"}} {
		c.faultList = append(c.faultList,
			cutOf("link "+l.link, links[l.link]),
			restartOf(l.third, regions[l.third].Srv),
			restoreOf("link "+l.link, links[l.link]))
	}
	// And back, in a long run: a adopts sa again.
	c.faultList = append(c.faultList, homeMoveOf(t, c.parts[0], regions, "b", "a"))
	c.faultList = append(c.faultList,
		strayWriteOf(t, regions["c"].Srv, "c", "sa"),
		compactionOf(regions["a"].Srv.EtcdClient),
		strayWriteOf(t, regions["c"].Srv, "c", "sb"),
		compactionOf(regions["b"].Srv.EtcdClient),
		strayWriteOf(t, regions["a"].Srv, "a", "sc"),
		compactionOf(regions["c"].Srv.EtcdClient))
	return c
}

// pausedHomeAt adds to c the partition of shard, homed at d (a cache in a
// child process), read consistently at d and at every cache of mirrors,
// and with resourceVersion=0 at the mirrors; its fault pauses d.
func pausedHomeAt(t *testing.T, c *cluster, d *cachetest.Region, shard string, mirrors map[string]*cachetest.Region) *pausedHome {
	t.Helper()
	p := partitionWith(t, d.Proc.ShardConfig(t, shard), shard)
	h := &pausedHome{home: d, shard: shard, mirrors: map[string]*Proxy{}, found: c.findings.add, long: *duration > time.Minute}
	for name, r := range mirrors {
		p.readers = append(p.readers, scopedReader(t, r.Srv, shard, p.answers))
		staleCfg := scopedConfig(r.Srv, shard)
		staleCfg.Wrap(p.answers.Wrap)
		stale, err := NewStaleReader(client.Unthrottled(staleCfg), d.Name, p.spaces)
		if err != nil {
			t.Fatal(err)
		}
		p.stale = append(p.stale, stale)
		h.mirrors[name] = memberProxy(t, r.Srv.Config())
	}
	c.parts = append(c.parts, p)
	return h
}

// homeMoveOf moves p's home from one cache to another as an operator
// does (docs/regions.md, "Moving a shard's home"), once: with the shard's
// writes held (p.gate) and the new home's copy confirmed current, the new
// home is restarted with --adopt-shard, the shard is pointed at it (p's
// proxy), and the writes go on once every cache's table names it. The
// move is an operation on every key of the history (OpMove): the keys keep
// their values, their revisions become the new home's. The flag acts once
// per cache and shard; later turns only say so.
func homeMoveOf(t *testing.T, p *partition, regions map[string]*cachetest.Region, from, to string) fault {
	t.Helper()
	shardCfg := regions[to].Srv.ShardConfig(t, p.shard)
	transport, err := rest.TransportFor(shardCfg)
	if err != nil {
		t.Fatal(err)
	}
	target, err := url.Parse(shardCfg.Host)
	if err != nil {
		t.Fatal(err)
	}
	// The move's own reads are not the traffic's: their answers are not
	// counted.
	atNewHome := scopedReader(t, regions[to].Srv, p.shard, &Answers{})
	moved := false
	return func(_ context.Context, t *testing.T, note func(string)) {
		if moved {
			note(fmt.Sprintf("no second move of %s from %s to %s (--adopt-shard acts once)", p.shard, from, to))
			return
		}
		moved = true
		ctx, cancel := context.WithTimeout(klog.NewContext(context.Background(), klog.Background()), 3*cachetest.DefaultTimeout)
		defer cancel()
		err := p.gate.Move(p.spaces, to, func() error {
			call := p.rec.Now()
			// Every write is held: once the new home answers a
			// consistent read, its copy holds every acknowledged one.
			if err := cachetest.Poll(ctx, func(ctx context.Context) error {
				_, err := atNewHome.List(ctx, metav1.ListOptions{})
				return err
			}); err != nil {
				return fmt.Errorf("%s confirming its copy of %s: %w", to, p.shard, err)
			}
			srv := regions[to].Srv
			if err := srv.Restart(ctx, func(o *cachetest.Options) {
				base := o.Flags
				o.Flags = func(opts *options.Options) {
					if base != nil {
						base(opts)
					}
					opts.Hierarchy.AdoptShards = append(opts.Hierarchy.AdoptShards, p.shard)
				}
			}); err != nil {
				return fmt.Errorf("restarting %s with --adopt-shard=%s: %w", to, p.shard, err)
			}
			p.proxy.Retarget(target, transport)
			for _, r := range regions {
				if err := cachetest.Poll(ctx, func(ctx context.Context) error {
					return homeIs(ctx, r.Srv, p.shard, to)
				}); err != nil {
					return fmt.Errorf("%s learning that %s moved to %s: %w", r.Name, p.shard, to, err)
				}
			}
			// And the writes stay held until the new home holds every
			// object as its own (its copies rewritten without their
			// bookkeeping, at a revision of its own) and every other
			// cache holds each of them as the new home's copy of exactly
			// that revision: the move itself must hide nothing, and
			// afterwards every cache answers one revision per key.
			var want map[string]string
			if err := cachetest.Poll(ctx, func(ctx context.Context) error {
				var err error
				want, err = homeRevisionsAt(ctx, atNewHome, "")
				return err
			}); err != nil {
				return fmt.Errorf("%s making %s's objects its own: %w", to, p.shard, err)
			}
			for _, r := range regions {
				if r.Name == to {
					continue
				}
				reader := scopedReader(t, r.Srv, p.shard, &Answers{})
				if err := cachetest.Poll(ctx, func(ctx context.Context) error {
					got, err := homeRevisionsAt(ctx, reader, to)
					if err == nil && !maps.Equal(got, want) {
						err = fmt.Errorf("holds %v as %s's, %s holds %v", got, to, to, want)
					}
					return err
				}); err != nil {
					return fmt.Errorf("%s following %s's move to %s: %w", r.Name, p.shard, to, err)
				}
			}
			keys := make([]string, trafficKeys)
			for i := range keys {
				keys[i] = fmt.Sprintf("k%d", i)
			}
			p.rec.RecordMove(keys, call, p.rec.Now())
			return nil
		})
		if err != nil {
			t.Errorf("moving the home of %s from %s to %s: %v", p.shard, from, to, err)
			// The caches of this shape run in this process: their
			// goroutines say what a read that never answers waits on.
			dumpGoroutines(t, "move-"+p.shard+"-"+from+"-"+to)
			return
		}
		note(fmt.Sprintf("the home of %s moved from %s to %s", p.shard, from, to))
	}
}

// dumpGoroutines writes the stacks of every goroutine of the test binary
// next to the saved histories, for a fault whose step timed out.
func dumpGoroutines(t *testing.T, what string) {
	dir := *saveDir
	if dir == "" {
		dir = t.TempDir()
	}
	path := filepath.Join(dir, strings.ReplaceAll(t.Name(), "/", "_")+"-"+what+"-goroutines.txt")
	f, err := os.Create(path)
	if err != nil {
		t.Logf("cannot write the goroutines: %v", err)
		return
	}
	defer f.Close()
	if err := pprof.Lookup("goroutine").WriteTo(f, 2); err != nil {
		t.Logf("cannot write the goroutines: %v", err)
		return
	}
	t.Logf("the goroutines of the test binary: %s", path)
}

// homeRevisionsAt reads what r holds now (resourceVersion=0) as the
// home's revision of each key: with home "", r is the home and must hold
// every object as its own (no copy bookkeeping); else every object must be
// home's copy.
func homeRevisionsAt(ctx context.Context, r dynamic.ResourceInterface, home string) (map[string]string, error) {
	list, err := r.List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, u := range list.Items {
		a := u.GetAnnotations()
		switch {
		case home == "" && a[kcpcache.AnnotationHome] != "":
			return nil, fmt.Errorf("%s is still a copy of %s's", u.GetName(), a[kcpcache.AnnotationHome])
		case home == "":
			out[u.GetName()] = u.GetResourceVersion()
		case a[kcpcache.AnnotationHome] != home:
			return nil, fmt.Errorf("%s is held as %q's", u.GetName(), a[kcpcache.AnnotationHome])
		default:
			out[u.GetName()] = a[kcpcache.AnnotationHomeResourceVersion]
		}
	}
	return out, nil
}

// homeIs checks that srv's table of home claims names home for shard.
func homeIs(ctx context.Context, srv *cachetest.Server, shard, home string) error {
	hc, err := rest.HTTPClientFor(srv.Config())
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, kcpcache.JoinHostPath(srv.Config().Host, kcpcache.HomesPath)+"?shard="+shard, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	var ans kcpcache.HomesAnswer
	if err := json.NewDecoder(resp.Body).Decode(&ans); err != nil {
		return err
	}
	if len(ans.Claims) != 1 || ans.Claims[0].Home != home || ans.Claims[0].ConflictsWith != "" {
		return fmt.Errorf("claims of %s: %+v", shard, ans.Claims)
	}
	return nil
}

// strayWriteOf writes shard's keys at srv (named at), a cache that is not
// the shard's home, with the shard's identity, as a misrouted shard
// would: a create and an unconditional update. The cache must refuse both
// (403 naming the home, or 503 when it cannot be sure) and apply neither:
// an accepted one fails the test, and its value, which no writer of the
// history wrote, would fail the linearizability check once read.
func strayWriteOf(t *testing.T, srv *cachetest.Server, at, shard string) fault {
	t.Helper()
	cfg := client.Unthrottled(srv.ShardConfig(t, shard))
	cfg.Host += kcpcache.ScopedPathPrefix(kcpcache.Scope{Shard: shard, Cluster: "root"})
	d, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	stray := d.Resource(Resource)
	n := 0
	return func(ctx context.Context, t *testing.T, note func(string)) {
		n++
		rctx, cancel := context.WithTimeout(ctx, requestTimeout)
		defer cancel()
		value := fmt.Sprintf("stray-%s-%d", at, n)
		_, createErr := stray.Create(rctx, object("k0", value, 0), metav1.CreateOptions{})
		_, updateErr := stray.Update(rctx, object("k1", value, 0), metav1.UpdateOptions{})
		note(fmt.Sprintf("a write of shard %s at %s, not its home: create %s, update %s", shard, at, answer(createErr), answer(updateErr)))
		for _, err := range []error{createErr, updateErr} {
			switch {
			case err == nil:
				t.Errorf("a write of shard %s at %s, not its home, was accepted", shard, at)
			case apierrors.IsForbidden(err), apierrors.IsServiceUnavailable(err), ctx.Err() != nil:
			default:
				t.Errorf("a write of shard %s at %s, not its home: %v, want 403 or 503", shard, at, err)
			}
		}
	}
}

// answer names a request's outcome by its HTTP status.
func answer(err error) string {
	if err == nil {
		return "accepted"
	}
	if status, ok := err.(apierrors.APIStatus); ok {
		return fmt.Sprintf("%d %s", status.Status().Code, status.Status().Reason)
	}
	return err.Error()
}

// cutOf cuts link, as a network partition between regions would.
func cutOf(what string, link *cachetest.LinkCutter) fault {
	return func(_ context.Context, _ *testing.T, note func(string)) {
		note(what + " cut")
		link.Cut()
	}
}

// restoreOf lets link forward new connections again.
func restoreOf(what string, link *cachetest.LinkCutter) fault {
	return func(_ context.Context, _ *testing.T, note func(string)) {
		note(what + " restored")
		link.Restore()
	}
}

// homedAt is a shape of one partition, shard's, homed at srv.
func homedAt(t *testing.T, srv *cachetest.Server, shard string) *cluster {
	t.Helper()
	return &cluster{srv: srv, parts: []*partition{partitionAt(t, srv, shard)}}
}

// partitionAt is shard's partition written at srv, its home, through a
// proxy with the shard's identity, and read there.
func partitionAt(t *testing.T, srv *cachetest.Server, shard string) *partition {
	t.Helper()
	return partitionWith(t, srv.ShardConfig(t, shard), shard)
}

// partitionWith is shard's partition written and read with shardCfg, the
// shard's identity at its home, through a proxy.
func partitionWith(t *testing.T, shardCfg *rest.Config, shard string) *partition {
	t.Helper()
	proxy := memberProxy(t, shardCfg)
	answers := &Answers{}
	cfg := &rest.Config{Host: proxy.URL + kcpcache.ScopedPathPrefix(kcpcache.Scope{Shard: shard, Cluster: "root"}), WrapTransport: answers.Wrap}
	cfg = AskBookkeeping(client.Unthrottled(cfg))
	d, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	written := d.Resource(Resource)
	return &partition{shard: shard, proxy: proxy, client: written, readers: []dynamic.ResourceInterface{written}, answers: answers}
}

// run sends traffic and watches every partition for d while inject (if
// any) injects faults every faultGap, then reads every key once more and
// checks each partition's history; the report sums them.
func (c *cluster) run(t *testing.T, d time.Duration, inject func(ctx context.Context, note func(string), n int)) Report {
	t.Helper()
	recs := make([]*Recorder, len(c.parts))
	for i, p := range c.parts {
		recs[i] = NewRecorder()
		p.rec = recs[i]
	}
	// A fault is part of every partition's history.
	note := func(what string) {
		for _, rec := range recs {
			rec.Fault(what)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	watchCtx, stopWatch := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	events := make([][]WatchEvent, len(c.parts))
	for i, p := range c.parts {
		wg.Go(func() { events[i] = Watch(watchCtx, p.client, p.spaces) })
	}
	if inject != nil {
		wg.Go(func() {
			gap := *faultGap
			if testing.Short() && gap > 2*time.Second {
				gap = 2 * time.Second
			}
			ticker := time.NewTicker(gap)
			defer ticker.Stop()
			for n := 0; ; n++ {
				select {
				case <-ctx.Done():
					return
				case <-ticker.C:
					inject(ctx, note, n)
				}
			}
		})
	}
	traffic := make([]Traffic, len(c.parts))
	var trafficWG sync.WaitGroup
	for i, p := range c.parts {
		traffic[i] = Traffic{Writers: 3, Keys: trafficKeys, KeyPrefix: c.keyPrefix, Readers: p.readers, StaleReaders: p.stale, Rec: recs[i], Spaces: p.spaces, Gate: p.gate}
		trafficWG.Go(func() { traffic[i].Run(ctx, p.client) })
	}
	trafficWG.Wait()
	finalCtx, cancelFinal := context.WithTimeout(context.Background(), time.Minute)
	defer cancelFinal()
	for i, p := range c.parts {
		if err := traffic[i].GetAll(finalCtx, p.client); err != nil {
			// The watchers and a fault still under way end first: they
			// report to t, which must not have ended.
			stopWatch()
			wg.Wait()
			t.Fatalf("shard %s: %v", p.shard, err)
		}
	}
	stopWatch()
	wg.Wait()
	var after []Violation
	if c.afterTraffic != nil {
		after = c.afterTraffic(finalCtx, t, note)
	}
	var total Report
	for i, p := range c.parts {
		recs[i].AddWatch(events[i])
		recs[i].AddServerErrors(p.answers.take())
		h := recs[i].History()
		rep := Check(h, time.Minute)
		if len(rep.Violations) > 0 {
			dir := *saveDir
			if dir == "" {
				dir = t.TempDir()
			}
			path := filepath.Join(dir, strings.ReplaceAll(t.Name(), "/", "_")+"-"+p.shard+".json")
			if err := h.Save(path); err == nil {
				t.Logf("shard %s: history saved to %s (check it again: go test ./cache/robustness -run TestCheckSavedHistory -robustness.history=%s)", p.shard, path, path)
			}
		}
		total.add(rep, len(c.parts) > 1, p.shard)
	}
	total.Violations = append(total.Violations, c.findings.take()...)
	total.Violations = append(total.Violations, after...)
	return total
}

// add sums rep into r; with named, each violation names its shard.
func (r *Report) add(rep Report, named bool, shard string) {
	r.Operations += rep.Operations
	r.Writes += rep.Writes
	r.Reads += rep.Reads
	r.Unknown += rep.Unknown
	r.Refused += rep.Refused
	r.MirrorReads += rep.MirrorReads
	r.StaleReads += rep.StaleReads
	r.TimeTravelRefused += rep.TimeTravelRefused
	r.WatchEvents += rep.WatchEvents
	if r.Faults == nil {
		r.Faults = rep.Faults
	}
	r.UnknownErrors = append(r.UnknownErrors, rep.UnknownErrors...)
	for k, n := range rep.ServerErrors {
		if r.ServerErrors == nil {
			r.ServerErrors = map[string]int{}
		}
		r.ServerErrors[k] += n
	}
	for _, v := range rep.Violations {
		if named {
			v.Details = "shard " + shard + ": " + v.Details
		}
		r.Violations = append(r.Violations, v)
	}
}

// fault injects one failure while traffic runs and notes it in the
// histories.
type fault func(ctx context.Context, t *testing.T, note func(string))

// faults injects the shape's faults in turn.
func (c *cluster) faults(t *testing.T) func(ctx context.Context, note func(string), n int) {
	return func(ctx context.Context, note func(string), n int) {
		c.faultList[n%len(c.faultList)](ctx, t, note)
	}
}

// restartOf restarts a cache server on its data: clients see refused
// connections and lost answers, watches end.
func restartOf(what string, srv *cachetest.Server) fault {
	return func(_ context.Context, t *testing.T, note func(string)) {
		note("restart of " + what)
		rctx, cancel := context.WithTimeout(klog.NewContext(context.Background(), klog.Background()), cachetest.DefaultTimeout)
		defer cancel()
		if err := srv.Restart(rctx); err != nil {
			t.Errorf("restarting %s: %v", what, err)
		}
	}
}

// compactionOf compacts the etcd that etcdClient returns a client of at
// its current revision: resumed watches from before it get 410 Gone.
func compactionOf(etcdClient func() *clientv3.Client) fault {
	return func(ctx context.Context, t *testing.T, note func(string)) {
		cli := etcdClient()
		resp, err := cli.Get(ctx, "/", nil...)
		if err != nil {
			return
		}
		note(fmt.Sprintf("etcd compaction at revision %d", resp.Header.Revision))
		if _, err := cli.Compact(ctx, resp.Header.Revision); err != nil {
			t.Logf("compaction: %v", err)
		}
	}
}

// memberFaults kill one member of cluster at a time, as a crash would (the
// next member each time), and start it again on its data: the cluster
// keeps its majority throughout, and a leader's crash makes it elect
// another.
func memberFaults(cluster *cachetest.EtcdCluster, members int) (kill, restart fault) {
	var next, killed int
	kill = func(_ context.Context, _ *testing.T, note func(string)) {
		killed = next % members
		next++
		note(fmt.Sprintf("SIGKILL of etcd member %d", killed))
		cluster.Kill(killed)
	}
	restart = func(_ context.Context, t *testing.T, note func(string)) {
		note(fmt.Sprintf("restart of etcd member %d on its data", killed))
		rctx, cancel := context.WithTimeout(klog.NewContext(context.Background(), klog.Background()), cachetest.DefaultTimeout)
		defer cancel()
		if err := cluster.Restart(rctx, killed); err != nil {
			t.Errorf("restarting etcd member %d: %v", killed, err)
		}
	}
	return kill, restart
}

func logReport(t *testing.T, shape string, rep Report) {
	t.Helper()
	t.Logf("%s: %d operations (%d writes, %d of unknown outcome, %d refused with 507, %d consistent reads, %d of them at another cache), %d stale reads at mirrors (%d refused by the reader as time travel), %d watch events, faults: %v",
		shape, rep.Operations, rep.Writes, rep.Unknown, rep.Refused, rep.Reads, rep.MirrorReads, rep.StaleReads, rep.TimeTravelRefused, rep.WatchEvents, rep.Faults)
	t.Logf("  5xx answers by status and reason: %s", formatCounts(rep.ServerErrors))
	for _, e := range rep.UnknownErrors {
		t.Logf("  a write of unknown outcome: %s", e)
	}
	for _, v := range rep.Violations {
		t.Logf("  violation: %s", v)
	}
}

// TestRobustness: traffic against one cache while it restarts and etcd
// compacts; the history holds every promise.
func TestRobustness(t *testing.T) {
	runShape(t, "one cache", startOneCache(t), func(rep Report) int { return rep.Reads })
}

// runShape runs traffic and faults against c for the run's duration and
// checks the history; reads counts the reads the shape must have made.
func runShape(t *testing.T, shape string, c *cluster, reads func(Report) int) {
	t.Helper()
	d := *duration
	if !flagSet("robustness.duration") {
		d += c.defaultExtra
	}
	if testing.Short() && d > 5*time.Second {
		// The quick path: a shorter run, still with a restart and a
		// compaction in it (faults every 2 s at most).
		d = 5 * time.Second
	}
	rep := c.run(t, d, c.faults(t))
	logReport(t, shape, rep)
	if rep.Writes == 0 || reads(rep) == 0 || rep.WatchEvents == 0 {
		t.Fatalf("the run did too little to check anything: %+v", rep)
	}
	if len(rep.Violations) > 0 {
		t.Errorf("%d violations", len(rep.Violations))
	}
}

// flagSet says whether the flag name was given.
func flagSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// TestRobustnessRegions: traffic of a shard homed at each of three caches
// while links between them are cut, caches restart, shards write at the
// wrong cache and etcds compact: consistent reads at any cache are
// linearizable with each home's writes, and each home's watch holds every
// promise.
func TestRobustnessRegions(t *testing.T) {
	if testing.Short() {
		t.Skip("long scenario (three caches in regions): skipped with -short")
	}
	runShape(t, "regions", startRegions(t), func(rep Report) int { return rep.MirrorReads })
}

// TestRobustnessMemoryGroup: traffic against an in-memory group of three
// while each member restarts in turn, its memory gone, and etcd compacts;
// reads at any member are linearizable with the writes through m0.
func TestRobustnessMemoryGroup(t *testing.T) {
	if testing.Short() {
		t.Skip("long scenario (a group of three in-memory servers): skipped with -short")
	}
	c, _ := startMemoryGroup(t)
	runShape(t, "memory group", c, func(rep Report) int { return rep.MirrorReads })
}

// TestRobustnessExternalEtcd: traffic against two caches on one external
// etcd cluster of three while its members crash and return in turn, the
// first cache restarts and etcd compacts; reads at either cache are
// linearizable with the writes through the first.
func TestRobustnessExternalEtcd(t *testing.T) {
	if testing.Short() {
		t.Skip("long scenario (three etcd members, two caches): skipped with -short")
	}
	runShape(t, "external etcd", startExternalEtcd(t), func(rep Report) int { return rep.Reads })
}

// TestSeededFaultsAreCaught: each deliberate bug is named by the check it
// breaks; with none switched on, the same traffic holds every promise.
func TestSeededFaultsAreCaught(t *testing.T) {
	for _, tc := range []struct {
		fault SeededFault
		check string
	}{
		{"", ""},
		{StaleConsistentRead, "linearizability"},
		{WatchSkipsAnEvent, "watch-gap"},
		{WatchReordersEvents, "watch-order"},
		{WriteDoneThenRefused, "linearizability"},
	} {
		name := string(tc.fault)
		if name == "" {
			name = "none"
		}
		t.Run(name, func(t *testing.T) {
			// Each case has its own cache; they run side by side.
			t.Parallel()
			c := startOneCache(t)
			c.parts[0].proxy.Enable(tc.fault)
			rep := c.run(t, 4*time.Second, nil)
			logReport(t, name, rep)
			var checks []string
			for _, v := range rep.Violations {
				checks = append(checks, v.Check)
			}
			switch {
			case tc.check == "" && len(checks) > 0:
				t.Errorf("violations without a seeded fault: %v", rep.Violations)
			case tc.check != "" && !slices.Contains(checks, tc.check):
				t.Errorf("seeded fault %s: violations %v, want one of %s", tc.fault, checks, tc.check)
			}
		})
	}
}

// TestSeededGroupFaultsAreCaught: each deliberate bug of a member of the
// memory-group shape, switched on in the proxies through which the traffic
// and the faults' checks read the members, is named by the check of the
// pause or the partition it breaks. One group serves every case, each in a
// partition of its own.
func TestSeededGroupFaultsAreCaught(t *testing.T) {
	if !*processSeeded {
		t.Skip("starts a group of three member processes and runs a pause and two cuts (about 75 s): run with -robustness.process-seeded")
	}
	mg := startGroup(t)
	for i, tc := range []struct {
		fault SeededFault
		// inject names the fault of the shape that shows the bug.
		inject string
		check  string
	}{
		{ReadsFromBeforeAPause, "pause of a follower", "linearizability"},
		{ConsistentReadWhileCutOff, "a minority cut", "partition-minority"},
		{StaleReadWithoutAge, "a minority cut", "partition-minority"},
	} {
		t.Run(string(tc.fault), func(t *testing.T) {
			c, g := groupShape(t, mg, fmt.Sprintf("seeded%d", i))
			for _, m := range g.members {
				m.proxy.Enable(tc.fault)
			}
			var f fault
			switch tc.inject {
			case "pause of a follower":
				// The member's proxy answers from what it held when
				// it was paused.
				g.onPause = func(m *groupMember) { m.proxy.Freeze() }
				f = g.pauseOf("follower")
			case "a minority cut":
				f = g.partitionOf(tc.inject, "m2")
			}
			rep := c.run(t, 8*time.Second, func(ctx context.Context, note func(string), n int) {
				if n == 0 {
					f(ctx, t, note)
				}
			})
			logReport(t, string(tc.fault), rep)
			var checks []string
			for _, v := range rep.Violations {
				checks = append(checks, v.Check)
			}
			if !slices.Contains(checks, tc.check) {
				t.Errorf("seeded fault %s: violations %v, want one of %s", tc.fault, checks, tc.check)
			}
		})
	}
}

// TestSeededPausedHomeIsCaught: each deliberate bug of a mirror, switched
// on in the proxy through which the paused home's fault reads it, is named
// by the check it breaks. Two caches: a, a mirror, and d, the home, in a
// child process; each case has a partition of its own.
func TestSeededPausedHomeIsCaught(t *testing.T) {
	if !*processSeeded {
		t.Skip("starts two caches, one in a child process, and pauses it twice (about 40 s): run with -robustness.process-seeded")
	}
	ctx, cancel := context.WithTimeout(klog.NewContext(context.Background(), klog.Background()), 3*cachetest.DefaultTimeout)
	defer cancel()
	regions := cachetest.StartRegions(t, ctx, cachetest.RegionsOptions{Processes: []string{"d"}}, "a", "d")
	for i, tc := range []struct {
		fault SeededFault
		check string
	}{
		{ConsistentReadWhileCutOff, "paused-home-consistent"},
		{StaleReadWithoutAge, "paused-home-stale"},
	} {
		t.Run(string(tc.fault), func(t *testing.T) {
			c := &cluster{}
			h := pausedHomeAt(t, c, regions["d"], fmt.Sprintf("seeded%d", i), map[string]*cachetest.Region{"a": regions["a"]})
			for _, mirror := range h.mirrors {
				mirror.Enable(tc.fault)
			}
			f := h.pauseOfHome()
			rep := c.run(t, 6*time.Second, func(ctx context.Context, note func(string), n int) {
				if n == 0 {
					f(ctx, t, note)
				}
			})
			logReport(t, string(tc.fault), rep)
			var checks []string
			for _, v := range rep.Violations {
				checks = append(checks, v.Check)
			}
			if !slices.Contains(checks, tc.check) {
				t.Errorf("seeded fault %s: violations %v, want one of %s", tc.fault, checks, tc.check)
			}
		})
	}
}

// TestCheckSavedHistory checks a saved history again, alone.
func TestCheckSavedHistory(t *testing.T) {
	if *replay == "" {
		t.Skip("no -robustness.history to check")
	}
	h, err := LoadHistory(*replay)
	if err != nil {
		t.Fatal(err)
	}
	rep := Check(h, time.Minute)
	logReport(t, *replay, rep)
	if len(rep.Violations) > 0 {
		t.Errorf("%d violations", len(rep.Violations))
	}
}

func TestMain(m *testing.M) {
	// The memory-group shape runs members as child processes of this
	// binary; the seeded leak's child leaks first (samples_test.go).
	leakIfAsked()
	cachetest.RunMemberIfAsked()
	flag.Parse()
	os.Exit(m.Run())
}
