package integration_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/options"
	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
	"github.com/kcp-cache/kcp-cache/cache/server/mirror"
)

// The tests of regions_relay_test.go check what a chain, a star, a tree and
// a ring serve. These check that what a full mesh does across one hop (a
// home restored from a backup, a home move, a deletion, a new claim) holds
// across two, in a chain east-west-south: east and south do not peer, and
// everything between them goes through west.

// startChain starts east, west and south peering east-west-south.
func startChain(t *testing.T, ctx context.Context) (n *relayNet, east, west, south *region) {
	t.Helper()
	n = startRelayNet(t, ctx, graphOf([2]string{"east", "west"}, [2]string{"west", "south"}), "east", "west", "south")
	return n, n.regions["east"], n.regions["west"], n.regions["south"]
}

// lifecycleContext is testContext with room for three caches' start and a
// home restored or moved after it (the start alone takes up to a minute on
// a loaded machine).
func lifecycleContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// put writes u, one more object of the shard, at its home, and records its
// resourceVersion there.
func (s *relayShard) put(ctx context.Context, t *testing.T, u *unstructured.Unstructured) {
	t.Helper()
	obj, err := s.home.shard(t, s.name).Create(ctx, u, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("shard %s writing %s at its home %s: %v", s.name, u.GetName(), s.home.name, err)
	}
	s.rvs[u.GetName()] = obj.GetResourceVersion()
}

// chainSample is what one read of a shard's partition answered.
type chainSample struct {
	cache      string
	consistent bool
	// started and answered are the read's times since the sampling began.
	started, answered time.Duration
	// code is 200 or 503; 0 for any other error (a cache restarting).
	code   int
	names  []string
	header string
	causes []metav1.StatusCause
	err    string
}

func (s chainSample) String() string {
	kind := "stale"
	if s.consistent {
		kind = "consistent"
	}
	switch s.code {
	case http.StatusOK:
		return fmt.Sprintf("%s read at %s, %v-%v: 200 %v, %s %q", kind, s.cache, s.started.Round(time.Millisecond), s.answered.Round(time.Millisecond), s.names, kcpcache.HomeRevisionHeader, s.header)
	case http.StatusServiceUnavailable:
		return fmt.Sprintf("%s read at %s, %v-%v: 503, causes %+v", kind, s.cache, s.started.Round(time.Millisecond), s.answered.Round(time.Millisecond), s.causes)
	}
	return fmt.Sprintf("%s read at %s, %v-%v: %s", kind, s.cache, s.started.Round(time.Millisecond), s.answered.Round(time.Millisecond), s.err)
}

// chainSampler reads a shard's partition at some caches every 100 ms, each
// both ways (stale and consistent, each on its own so that a consistent
// read waiting for its home does not space the stale ones), until stop.
type chainSampler struct {
	start   time.Time
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	mu      sync.Mutex
	samples []chainSample
}

func startChainSampler(ctx context.Context, shard string, regions ...*region) *chainSampler {
	sctx, cancel := context.WithCancel(ctx)
	s := &chainSampler{start: time.Now(), cancel: cancel}
	for _, r := range regions {
		for _, consistent := range []bool{false, true} {
			s.wg.Go(func() {
				ticker := time.NewTicker(100 * time.Millisecond)
				defer ticker.Stop()
				for {
					s.sample(sctx, r, shard, consistent)
					select {
					case <-sctx.Done():
						return
					case <-ticker.C:
					}
				}
			})
		}
	}
	return s
}

// since is the time since the sampling began.
func (s *chainSampler) since() time.Duration { return time.Since(s.start) }

func (s *chainSampler) sample(ctx context.Context, r *region, shard string, consistent bool) {
	rv := "0"
	if consistent {
		rv = ""
	}
	started := s.since()
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	got := r.read(rctx, shard, rv)
	cancel()
	if ctx.Err() != nil {
		return
	}
	cs := chainSample{cache: r.name, consistent: consistent, started: started, answered: s.since()}
	var status apierrors.APIStatus
	switch {
	case got.err == nil:
		cs.code, cs.names, cs.header = http.StatusOK, partitionsOf(got.items), got.header.Get(kcpcache.HomeRevisionHeader)
	case apierrors.IsServiceUnavailable(got.err):
		cs.code = http.StatusServiceUnavailable
		if errors.As(got.err, &status) && status.Status().Details != nil {
			cs.causes = status.Status().Details.Causes
		}
	default:
		cs.err = describe(got.err)
	}
	s.mu.Lock()
	s.samples = append(s.samples, cs)
	s.mu.Unlock()
}

// staleAnswered matches the stale reads at cache answered 200.
func staleAnswered(cache string) func(chainSample) bool {
	return func(smp chainSample) bool { return smp.cache == cache && !smp.consistent && smp.code == http.StatusOK }
}

// awaitStale waits, until timeout, for at least enough[cache] stale reads
// answered 200 at each cache: a move that completes quickly leaves too few
// samples otherwise, and reads after it are judged the same way.
func (s *chainSampler) awaitStale(ctx context.Context, enough map[string]int, timeout time.Duration) {
	_ = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		for cache, n := range enough {
			if count(s.samples, staleAnswered(cache)) < n {
				return false, nil
			}
		}
		return true, nil
	})
}

// stop ends the sampling and returns every sample.
func (s *chainSampler) stop() []chainSample {
	s.cancel()
	s.wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.samples)
}

// count returns how many samples match.
func count(samples []chainSample, match func(chainSample) bool) int {
	n := 0
	for _, s := range samples {
		if match(s) {
			n++
		}
	}
	return n
}

// hasCause reports whether causes hold one of reason whose field is field.
func hasCause(causes []metav1.StatusCause, reason, field string) bool {
	return slices.ContainsFunc(causes, func(c metav1.StatusCause) bool { return string(c.Type) == reason && c.Field == field })
}

// wantForbiddenNaming checks that err is a 403 whose message names home as
// the shard's home.
func wantForbiddenNaming(t *testing.T, what string, err error, home string) {
	t.Helper()
	if !apierrors.IsForbidden(err) {
		t.Fatalf("%s: got %v, want 403 naming the home %s", what, err, home)
	}
	if named := fmt.Sprintf("is the cache %q", home); !strings.Contains(err.Error(), named) {
		t.Fatalf("%s: 403 %q does not name the home %s (%s)", what, err.Error(), home, named)
	}
}

// restoredObject makes the shard's objects of TestRelayHomeRestored...: as
// a shard with heartbeats writes them (no origin), or as kcp's replication
// pushes them (kcpPushedCopy, origin resourceVersion originRV).
type restoredObject func(name string, originRV int64) *unstructured.Unstructured

// TestRelayHomeRestoredIsHeldAtEveryHop: south is the home of shard-south,
// whose heartbeat there says it converged; west mirrors it from south,
// east through west. South is restored from a copy of its etcd directory
// taken before a write that every cache had: south's epoch changes, and it
// lacks the write. At west and at east, consistent reads of shard-south
// answer 503 HomeRestored naming south and never 200 until the shard has
// written again at south and its heartbeat there says it converged in
// south's new epoch; stale reads (every 100 ms at both) always have the
// write. Then both follow south again: every object, the header naming
// south in its new epoch.
func TestRelayHomeRestoredIsHeldAtEveryHop(t *testing.T) {
	if testing.Short() {
		t.Skip("long scenario (several caches in regions, a home restored from a backup): skipped with -short")
	}
	testRelayHomeRestored(t, true, func(name string, _ int64) *unstructured.Unstructured {
		return apiExport(name, map[string]interface{}{"home": "south"})
	})
}

// TestRelayHomeRestoredWithoutHeartbeatsIsHeldAtEveryHop is
// TestRelayHomeRestoredIsHeldAtEveryHop for a shard that writes no
// heartbeat (kcp's own replication): its objects carry their origin's UID
// and resourceVersion, and the holds at west and at east end once the
// origins show the partition whole at south again (at east: whole at west,
// which serves south's objects as south holds them).
func TestRelayHomeRestoredWithoutHeartbeatsIsHeldAtEveryHop(t *testing.T) {
	if testing.Short() {
		t.Skip("long scenario (several caches in regions, a home restored from a backup): skipped with -short")
	}
	testRelayHomeRestored(t, false, kcpPushedCopy)
}

func testRelayHomeRestored(t *testing.T, heartbeats bool, object restoredObject) {
	ctx := lifecycleContext(t)
	_, east, west, south := startChain(t, ctx)
	s := &relayShard{name: "shard-south", home: south, rvs: map[string]string{}}
	for i, name := range []string{"one", "two", "three"} {
		s.put(ctx, t, object(name, int64(10+i)))
	}
	if heartbeats {
		putConvergedHeartbeat(ctx, t, south, s.name)
	}
	eventually(t, "west serves shard-south from south", func(ctx context.Context) error {
		return checkRelayed(ctx, west, s, "south")
	})
	eventually(t, "east serves shard-south through west", func(ctx context.Context) error {
		return checkRelayed(ctx, east, s, "south,west")
	})

	// A copy of south's etcd directory, then a write the copy lacks.
	south.stop(t)
	backup := t.TempDir()
	if err := os.CopyFS(backup, os.DirFS(south.opts.EtcdDirectory)); err != nil {
		t.Fatal(err)
	}
	south.start(t, ctx)
	epochBefore := south.srv.Server().Epoch()
	s.put(ctx, t, object("later", 20))
	eventually(t, "east holds south's write made after the copy", func(ctx context.Context) error {
		return checkRelayed(ctx, east, s, "south,west")
	})
	eventually(t, "west holds south's write made after the copy", func(ctx context.Context) error {
		return checkRelayed(ctx, west, s, "south")
	})
	want := s.partitions()

	// The samplers run from here until both mirrors follow south again.
	sampler := startChainSampler(ctx, s.name, west, east)
	var restoreBegan, convergeBegan time.Duration
	var epochAfter string
	defer func() {
		if !t.Failed() {
			sampler.awaitStale(ctx, map[string]int{"west": 20, "east": 20}, cachetest.DefaultTimeout)
		}
		samples := sampler.stop()
		judgeRestored(t, samples, want, restoreBegan, convergeBegan, epochBefore, epochAfter)
	}()

	// South is restored from the copy: a new epoch, without "later". From
	// its stop on, no consistent read can be confirmed with the old epoch.
	south.stop(t)
	restoreBegan = sampler.since()
	if err := os.RemoveAll(south.opts.EtcdDirectory); err != nil {
		t.Fatal(err)
	}
	if err := os.CopyFS(south.opts.EtcdDirectory, os.DirFS(backup)); err != nil {
		t.Fatal(err)
	}
	south.start(t, ctx)
	epochAfter = south.srv.Server().Epoch()
	if epochAfter == epochBefore {
		t.Fatalf("south restored from a copy of its etcd directory kept its epoch %s", epochBefore)
	}
	if got := south.read(ctx, s.name, ""); got.err != nil || slices.Contains(partitionsOf(got.items), s.name+"/root/later") {
		t.Fatalf("south after its restore: %v, %s; want the objects without later", partitionsOf(got.items), describe(got.err))
	}
	// Both hold: consistent reads say why (the samplers check that none
	// answered 200 meanwhile), stale reads still have "later".
	for _, at := range []*region{west, east} {
		eventually(t, at.name+" refuses consistent reads of shard-south with "+mirror.ReasonHomeRestored+" naming south", func(ctx context.Context) error {
			got := at.read(ctx, s.name, "")
			if got.err == nil {
				return fmt.Errorf("answered 200 with %v (the samplers judge it)", partitionsOf(got.items))
			}
			return refusedWith(got.err, mirror.ReasonHomeRestored, "south", "")
		})
		wantStale(ctx, t, at, s)
	}

	// The shard converges its partition at south again, then says so (its
	// heartbeat), or its objects' origins say so.
	delete(s.rvs, "later")
	convergeBegan = sampler.since()
	s.put(ctx, t, object("later", 20))
	if heartbeats {
		putConvergedHeartbeat(ctx, t, south, s.name)
	}
	converged := time.Now()
	eventually(t, "west follows south in its new epoch", func(ctx context.Context) error {
		return checkRelayed(ctx, west, s, "south")
	})
	t.Logf("west followed south %v after the shard converged there", time.Since(converged).Round(100*time.Millisecond))
	eventually(t, "east follows south in its new epoch, through west", func(ctx context.Context) error {
		return checkRelayed(ctx, east, s, "south,west")
	})
	t.Logf("east followed south %v after the shard converged there", time.Since(converged).Round(100*time.Millisecond))
}

// judgeRestored checks the samples of testRelayHomeRestored: every stale
// read answered 200 with want; no consistent read that started after the
// restore began answered 200 before the shard converged again, and every
// one that answered 200 had want and named south in its new epoch; each
// mirror refused at least once with HomeRestored naming south.
func judgeRestored(t *testing.T, samples []chainSample, want []string, restoreBegan, convergeBegan time.Duration, epochBefore, epochAfter string) {
	t.Helper()
	for _, cache := range []string{"west", "east"} {
		stale := func(s chainSample) bool { return s.cache == cache && !s.consistent }
		held := func(s chainSample) bool {
			return s.cache == cache && s.consistent && s.code == http.StatusServiceUnavailable && hasCause(s.causes, mirror.ReasonHomeRestored, "south")
		}
		t.Logf("reads at %s: %d stale, %d consistent (%d refused with %s)", cache, count(samples, stale),
			count(samples, func(s chainSample) bool { return s.cache == cache && s.consistent }), count(samples, held), mirror.ReasonHomeRestored)
		if n := count(samples, stale); n < 20 {
			t.Errorf("only %d stale reads at %s: too few to judge", n, cache)
		}
		if count(samples, held) == 0 {
			t.Errorf("no consistent read at %s was refused with %s naming south", cache, mirror.ReasonHomeRestored)
		}
	}
	var bad []string
	for _, s := range samples {
		switch {
		case !s.consistent && (s.code != http.StatusOK || !slices.Equal(s.names, want)):
			bad = append(bad, fmt.Sprintf("%v, want 200 with %v", s, want))
		case !s.consistent || s.code != http.StatusOK || s.started < restoreBegan:
		case convergeBegan == 0 || s.answered < convergeBegan:
			bad = append(bad, fmt.Sprintf("%v: 200 before the shard converged at the restored south", s))
		case !slices.Equal(s.names, want):
			bad = append(bad, fmt.Sprintf("%v, want %v", s, want))
		default:
			entries, err := kcpcache.ParseHomeRevisions(s.header)
			if err != nil || len(entries) != 1 || entries[0].Home != "south" || entries[0].Epoch != epochAfter {
				bad = append(bad, fmt.Sprintf("%v: want one entry south=%s/<revision> (south's new epoch; before the restore %s)", s, epochAfter, epochBefore))
			}
		}
	}
	if len(bad) > 0 {
		t.Errorf("%d reads answered what they must not:\n%s", len(bad), strings.Join(bad, "\n"))
	}
}

// deletionWatch records the DELETED events of a watch of a shard's
// partition at a cache, resuming it when the server ends it, until stop.
type deletionWatch struct {
	cancel  context.CancelFunc
	done    chan struct{}
	mu      sync.Mutex
	deleted []string
	errs    []string
}

func watchDeletions(ctx context.Context, t *testing.T, r *region, shard string) *deletionWatch {
	t.Helper()
	res := dyn(t, r.srv, shard, kcpcache.Wildcard).Resource(apiExports)
	list, err := res.List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		t.Fatalf("listing %s at %s to watch it: %v", shard, r.name, err)
	}
	wctx, cancel := context.WithCancel(ctx)
	d := &deletionWatch{cancel: cancel, done: make(chan struct{})}
	start := time.Now()
	timeout := int64(600)
	w, err := res.Watch(wctx, metav1.ListOptions{ResourceVersion: list.GetResourceVersion(), TimeoutSeconds: &timeout})
	if err != nil {
		t.Fatalf("watching %s at %s: %v", shard, r.name, err)
	}
	go func() {
		defer close(d.done)
		from := list.GetResourceVersion()
		for current := w; ; {
			for ev := range current.ResultChan() {
				if ev.Type == watch.Error {
					if wctx.Err() == nil {
						d.mu.Lock()
						d.errs = append(d.errs, fmt.Sprintf("%v: %v", time.Since(start), apierrors.FromObject(ev.Object)))
						d.mu.Unlock()
					}
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
				if ev.Type == watch.Deleted {
					d.mu.Lock()
					d.deleted = append(d.deleted, fmt.Sprintf("%s at %s after %v", m.GetName(), r.name, time.Since(start)))
					d.mu.Unlock()
				}
			}
			current.Stop()
			if wctx.Err() != nil {
				return
			}
			next, err := res.Watch(wctx, metav1.ListOptions{ResourceVersion: from, TimeoutSeconds: &timeout})
			if err != nil {
				if wctx.Err() == nil {
					d.mu.Lock()
					d.errs = append(d.errs, fmt.Sprintf("%v: resuming from %s: %v", time.Since(start), from, err))
					d.mu.Unlock()
				}
				return
			}
			current = next
		}
	}()
	return d
}

// stop ends the watch and returns its DELETED events and failures.
func (d *deletionWatch) stop() (deleted, errs []string) {
	d.cancel()
	<-d.done
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.deleted), slices.Clone(d.errs)
}

// TestRelayShardMovesHomeAcrossHops: shard s holds 20 objects at south;
// west mirrors them, east through west. East is restarted with
// --adopt-shard=s: the home moves two hops away from south. Throughout,
// every cache is read every 100 ms, stale and consistently: no read
// answers 200 with fewer than 20 objects; watches at south and at west see
// no DELETED. Afterwards every cache holds the 20 as east's (west's copies
// came along "east", south's along "east,west"), the shard's next write at
// east reaches south, and its write at south (or west) is refused naming
// east.
func TestRelayShardMovesHomeAcrossHops(t *testing.T) {
	if testing.Short() {
		t.Skip("long scenario (several caches in regions, a home move): skipped with -short")
	}
	ctx := lifecycleContext(t)
	_, east, west, south := startChain(t, ctx)
	const objects = 20
	var names []string
	for i := range objects {
		names = append(names, fmt.Sprintf("export-%02d", i))
	}
	s := writeShard(ctx, t, south, "s", names...)
	eventually(t, "east serves s through west", func(ctx context.Context) error {
		return checkRelayed(ctx, east, s, "south,west")
	})
	eventually(t, "west serves s from south", func(ctx context.Context) error {
		return checkRelayed(ctx, west, s, "south")
	})

	sampler := startChainSampler(ctx, s.name, east, west, south)
	watches := map[string]*deletionWatch{}
	for _, r := range []*region{south, west} {
		watches[r.name] = watchDeletions(ctx, t, r, s.name)
	}
	// East is down for part of the move (its restart): it must answer
	// once it is back; the others throughout.
	enough := map[string]int{"east": 1, "west": 20, "south": 20}
	// Judged however the test ends: a move that never completes still
	// shows what the readers were answered meanwhile.
	defer func() {
		if !t.Failed() {
			sampler.awaitStale(ctx, enough, cachetest.DefaultTimeout)
		}
		samples := sampler.stop()
		for _, cache := range []string{"east", "west", "south"} {
			for _, consistent := range []bool{false, true} {
				codes := map[int]int{}
				for _, smp := range samples {
					if smp.cache == cache && smp.consistent == consistent {
						codes[smp.code]++
					}
				}
				t.Logf("reads during the move at %s, consistent=%v: %v (by code; 0: no answer)", cache, consistent, codes)
			}
			if n := count(samples, staleAnswered(cache)); n < enough[cache] {
				t.Errorf("only %d stale reads at %s answered during the move: too few to judge", n, cache)
			}
		}
		for _, smp := range samples {
			if smp.code == http.StatusOK && len(smp.names) < objects {
				t.Errorf("%v: fewer than the %d objects the shard had acknowledged", smp, objects)
			}
		}
		for _, name := range []string{"south", "west"} {
			deleted, errs := watches[name].stop()
			if len(deleted) > 0 {
				t.Errorf("the watch at %s saw DELETED for objects that exist throughout: %v", name, deleted)
			}
			if len(errs) > 0 {
				t.Errorf("the watch at %s failed: %v", name, errs)
			}
		}
	}()

	// The move: east adopts s at a restart.
	east.opts.Flags = func(base func(*options.Options)) func(*options.Options) {
		return func(o *options.Options) {
			base(o)
			o.Hierarchy.AdoptShards = []string{s.name}
		}
	}(east.opts.Flags)
	moved := time.Now()
	if err := east.srv.Restart(ctx, func(o *cachetest.Options) { o.Flags = east.opts.Flags }); err != nil {
		t.Fatal(err)
	}
	waitItems(t, east, s.name, objects, "")
	waitItems(t, west, s.name, objects, "east")
	waitItems(t, south, s.name, objects, "east")
	t.Logf("every cache held s as east's %v after east's restart began", time.Since(moved).Round(100*time.Millisecond))

	// The shard is east's now: its objects as east holds them, copies
	// along the chain.
	moving := &relayShard{name: s.name, home: east, rvs: map[string]string{}}
	eventually(t, "every cache serves s as east's, each copy along its path", func(ctx context.Context) error {
		items, err := east.items(ctx, t, s.name, "")
		if err != nil {
			return err
		}
		moving.rvs = map[string]string{}
		for _, u := range items {
			moving.rvs[u.GetName()] = u.GetResourceVersion()
		}
		for at, path := range map[*region]string{east: "", west: "east", south: "east,west"} {
			if err := checkRelayed(ctx, at, moving, path); err != nil {
				return err
			}
		}
		return nil
	})
	for _, table := range []*region{east, west, south} {
		ans, err := table.homesTable(ctx, t, s.name)
		if err != nil || len(ans.Claims) != 1 || ans.Claims[0].Home != "east" || ans.Claims[0].Generation != 2 {
			t.Fatalf("%s's claims of s after the move: %+v, %v; want east at generation 2", table.name, ans.Claims, err)
		}
	}

	// The shard writes at its new home: it reaches south, two hops away;
	// south and west refuse its writes.
	moving.create(ctx, t, "after-the-move")
	wantSeenSoon(t, south, moving)
	if err := checkRelayed(ctx, south, moving, "east,west"); err != nil {
		t.Fatal(err)
	}
	for _, r := range []*region{south, west} {
		_, err := r.shard(t, s.name).Create(ctx, apiExport("stray-"+r.name, nil), metav1.CreateOptions{})
		wantForbiddenNaming(t, "s writing at "+r.name+" after its move to east", err, "east")
	}
}

// TestRelayDeletionReachesEveryHop: shard-south's objects at south, east
// reading them through west. Each deletion at south is gone from a
// consistent read at west and at east as soon as south acknowledged it,
// and the Kcp-Cache-Home-Revision of that read is at least south's own for
// the same read after the deletion (south's epoch); stale reads at both
// lose the object within a deadline.
func TestRelayDeletionReachesEveryHop(t *testing.T) {
	if testing.Short() {
		t.Skip("long scenario (several caches in regions): skipped with -short")
	}
	ctx := lifecycleContext(t)
	_, east, west, south := startChain(t, ctx)
	s := writeShard(ctx, t, south, "shard-south", "keep-1", "keep-2", "gone-1", "gone-2", "gone-3")
	eventually(t, "east serves shard-south through west", func(ctx context.Context) error {
		return checkRelayed(ctx, east, s, "south,west")
	})
	eventually(t, "west serves shard-south from south", func(ctx context.Context) error {
		return checkRelayed(ctx, west, s, "south")
	})

	epoch := south.srv.Server().Epoch()
	revisionOf := func(at *region, got partitionRead) int64 {
		t.Helper()
		header := got.header.Get(kcpcache.HomeRevisionHeader)
		entries, err := kcpcache.ParseHomeRevisions(header)
		if err != nil || len(entries) != 1 || entries[0].Home != "south" || entries[0].Epoch != epoch {
			t.Fatalf("consistent read of shard-south at %s: %s %q (%v), want one entry south=%s/<revision>", at.name, kcpcache.HomeRevisionHeader, header, err, epoch)
		}
		return entries[0].Revision
	}
	for _, gone := range []string{"gone-1", "gone-2", "gone-3"} {
		if err := south.shard(t, s.name).Delete(ctx, gone, metav1.DeleteOptions{}); err != nil {
			t.Fatalf("shard-south deleting %s at south: %v", gone, err)
		}
		delete(s.rvs, gone)
		atSouth := south.read(ctx, s.name, "")
		if atSouth.err != nil || !slices.Equal(partitionsOf(atSouth.items), s.partitions()) {
			t.Fatalf("consistent read of shard-south at south after deleting %s: %v, %s; want %v", gone, partitionsOf(atSouth.items), describe(atSouth.err), s.partitions())
		}
		want := revisionOf(south, atSouth)
		revs := map[string]int64{}
		for _, at := range []*region{west, east} {
			got := at.read(ctx, s.name, "")
			if got.err != nil {
				t.Fatalf("consistent read of shard-south at %s right after south acknowledged deleting %s: %s", at.name, gone, describe(got.err))
			}
			if names := partitionsOf(got.items); !slices.Equal(names, s.partitions()) {
				t.Fatalf("consistent read of shard-south at %s right after south acknowledged deleting %s: %v, want %v", at.name, gone, names, s.partitions())
			}
			if rev := revisionOf(at, got); rev < want {
				t.Fatalf("consistent read of shard-south at %s right after south acknowledged deleting %s: home revision %d, below south's %d for the same read", at.name, gone, rev, want)
			} else {
				revs[at.name] = rev
			}
		}
		t.Logf("deleting %s: home revision %d at south, %d at west, %d at east", gone, want, revs["west"], revs["east"])
	}
	for _, at := range []*region{west, east} {
		eventually(t, at.name+"'s stale reads of shard-south lose the deleted objects", func(ctx context.Context) error {
			got := at.read(ctx, s.name, "0")
			if got.err != nil {
				return fmt.Errorf("stale read of shard-south at %s: %s", at.name, describe(got.err))
			}
			if names := partitionsOf(got.items); !slices.Equal(names, s.partitions()) {
				return fmt.Errorf("stale read of shard-south at %s: %v, want %v", at.name, names, s.partitions())
			}
			return nil
		})
	}
	for _, at := range []*region{west, east} {
		path := homePath(graphOf([2]string{"east", "west"}, [2]string{"west", "south"}).path(at.name, "south"))
		if err := checkRelayed(ctx, at, s, path); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRelayClaimsPropagate: claims cross the chain both ways. Shard-south,
// homed at south, writing at east or at west is refused with 403 naming
// south. A new shard, known nowhere, writes first at east: east claims it;
// once south has learnt the claim through west, the shard's write at
// south (and at west) is refused with 403 naming east, and its object
// reaches south.
func TestRelayClaimsPropagate(t *testing.T) {
	if testing.Short() {
		t.Skip("long scenario (several caches in regions): skipped with -short")
	}
	ctx := lifecycleContext(t)
	_, east, west, south := startChain(t, ctx)
	shardSouth := writeShard(ctx, t, south, "shard-south", "one")
	eventually(t, "east serves shard-south through west", func(ctx context.Context) error {
		return checkRelayed(ctx, east, shardSouth, "south,west")
	})
	for _, r := range []*region{east, west} {
		_, err := r.shard(t, shardSouth.name).Create(ctx, apiExport("stray-"+r.name, nil), metav1.CreateOptions{})
		wantForbiddenNaming(t, "shard-south writing at "+r.name, err, "south")
	}

	// A new shard writes first at east.
	for _, r := range []*region{east, west, south} {
		ans, err := r.homesTable(ctx, t, "shard-new")
		if err != nil || len(ans.Claims) != 0 {
			t.Fatalf("%s's claims of shard-new before its first write: %+v, %v; want none", r.name, ans.Claims, err)
		}
	}
	shardNew := writeShard(ctx, t, east, "shard-new", "first")
	ans, err := east.homesTable(ctx, t, shardNew.name)
	if err != nil || len(ans.Claims) != 1 || ans.Claims[0].Home != "east" || ans.Claims[0].Generation != 1 || !ans.Claims[0].Held {
		t.Fatalf("east's claims of shard-new after its first write there: %+v, %v; want east at generation 1, held", ans.Claims, err)
	}
	eventually(t, "south learns through west that east holds shard-new", func(ctx context.Context) error {
		ans, err := south.homesTable(ctx, t, shardNew.name)
		if err != nil {
			return err
		}
		if len(ans.Claims) != 1 || ans.Claims[0].Home != "east" || ans.Claims[0].Generation != 1 || ans.Claims[0].Held {
			return fmt.Errorf("south's claims of shard-new: %+v; want east at generation 1", ans.Claims)
		}
		return nil
	})
	for _, r := range []*region{south, west} {
		_, err := r.shard(t, shardNew.name).Create(ctx, apiExport("stray-"+r.name, nil), metav1.CreateOptions{})
		wantForbiddenNaming(t, "shard-new writing at "+r.name+" after east claimed it", err, "east")
	}
	eventually(t, "south serves shard-new through west", func(ctx context.Context) error {
		return checkRelayed(ctx, south, shardNew, "east,west")
	})
	// Nothing moved: east still holds the claim and its object as its own.
	if err := checkRelayed(ctx, east, shardNew, ""); err != nil {
		t.Fatal(err)
	}
}
