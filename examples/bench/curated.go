package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
	"github.com/kcp-cache/kcp-cache/cache/server/mirror"
)

// The relays phase's curated-promotion memory: a region (the home of its
// shards' partitions) and an upstream global cache that peers with it, as
// in docs/regions.md's "Curated promotion: --pass-on". The region holds
// as many apiexports as apiresourceschemas; global holds everything of it
// first, then, on an emptied etcd, only what the region passes on to it
// with --pass-on=global=apiexports.apis.kcp.io. Each of the two states is
// measured as the regions phase measures a mirror (regionsMemory): the
// process's heap after GC and RSS before and after global restarts with
// its peer and copies what it holds, net of a control, the same restart
// while the region held nothing.

const (
	curatedRegion = "region"
	curatedGlobal = "global"
)

// curatedTypes are the region's two types; only the first is passed on in
// the subset.
var curatedTypes = []struct {
	gvr  schema.GroupVersionResource
	kind string
}{
	{apiExports, "APIExport"},
	{idleType, "APIResourceSchema"},
}

// curatedPassOn is the region's --pass-on in the subset.
func curatedPassOn() []string {
	return []string{curatedGlobal + "=" + curatedTypes[0].gvr.GroupResource().String()}
}

// curatedState is one state of global: everything, or the subset.
type curatedState struct {
	name string
	// The control (global restarted with its peer while the region held
	// nothing) and the measurement (the same while the region held the
	// data set), each before and after.
	controlBefore, controlAfter, before, after memSnapshot
	// restartTime is global's restart with its peer, until ready;
	// syncTime from then until it held what it holds.
	restartTime, syncTime time.Duration
	held                  curatedHeld
}

// curatedHeld is what global holds of the region's data, read at global.
type curatedHeld struct {
	// listed are the items of a consistent */* LIST of each passed-on
	// type, stored the copies of each type in its etcd, by resource.
	listed map[string]int
	stored map[string]int64
	// refused are the refusals of the types not passed on: a consistent
	// and a resourceVersion=0 */* LIST, each a 503 with a NotPassedOn
	// cause naming the region.
	refused map[string][]string
}

func (h curatedHeld) total() int {
	n := 0
	for _, v := range h.listed {
		n += v
	}
	return n
}

// curatedResult is the measurement.
type curatedResult struct {
	objects int // of each type
	// The region's load, global not peering.
	beforeLoad, loaded memSnapshot
	loadTime           time.Duration
	all, subset        curatedState
	// After the everything state, the region restarted with the pass-on
	// while global, holding everything, went on peering with it: global's
	// etcd then still held narrowedStored copies of the type no longer
	// passed on, and answered narrowedRefusal to a consistent */* LIST of
	// it; narrowed is the process's memory then.
	narrowedStored  int64
	narrowedRefusal string
	narrowed        memSnapshot
	startTime       time.Duration
}

// curatedMemory measures global's memory holding everything of the
// region's data against holding only the apiexports.
func (b *bench) curatedMemory(ctx context.Context, dir string) (curatedResult, error) {
	res := curatedResult{objects: b.cfg.relaysCuratedObjects}
	res.all.name, res.subset.name = "everything", "subset"
	for _, name := range []string{curatedRegion, curatedGlobal} {
		if err := os.Mkdir(filepath.Join(dir, name), 0o700); err != nil {
			return res, err
		}
	}
	// global first, without peers: the region's --peer needs global's
	// serving certificate. The region peers with global throughout (a
	// --pass-on names a peer); it starts with the pass-on, for the
	// subset's control.
	progress("relays, curated: starting cache %s (the upstream, not yet peering) and cache %s (its region, peering with %s, passing on only %s)", curatedGlobal, curatedRegion, curatedGlobal, curatedTypes[0].gvr.GroupResource())
	start := time.Now()
	global, err := b.startRegion(ctx, filepath.Join(dir, curatedGlobal), curatedGlobal, []string{curatedRegion}, nil)
	if err != nil {
		return res, err
	}
	defer func() { _ = global.srv.Stop() }()
	regionPeer, err := global.peerFlag(curatedRegion)
	if err != nil {
		return res, err
	}
	region, err := b.startRegionWith(ctx, filepath.Join(dir, curatedRegion), curatedRegion, []string{curatedGlobal}, []string{regionPeer}, curatedPassOn())
	if err != nil {
		return res, err
	}
	defer func() { _ = region.srv.Stop() }()
	globalPeer, err := region.peerFlag(curatedGlobal)
	if err != nil {
		return res, err
	}
	res.startTime = time.Since(start)
	peering, notPeering := []string{globalPeer}, []string(nil)
	restartRegion := func(passOn []string) error {
		region.passOn = passOn
		if err := region.restart(ctx, b.cfg.serverFlags, []string{regionPeer}); err != nil {
			return fmt.Errorf("restarting cache %s (--pass-on %v): %w", region.name, passOn, err)
		}
		return nil
	}
	// measure restarts global with its peer, from global without peers,
	// and waits until it holds want objects of each passed-on type (and
	// refuses the others, when the region held them).
	measure := func(before, after *memSnapshot, passed []schema.GroupVersionResource, want int, refusals bool) (curatedHeld, time.Duration, time.Duration, error) {
		var held curatedHeld
		var err error
		if *before, err = settledSnapshot(ctx); err != nil {
			return held, 0, 0, err
		}
		start := time.Now()
		if err := global.restart(ctx, b.cfg.serverFlags, peering); err != nil {
			return held, 0, 0, err
		}
		restart := time.Since(start)
		if held, err = waitHeld(ctx, global, curatedRegion, passed, want, refusals); err != nil {
			return held, 0, 0, err
		}
		sync := time.Since(start) - restart
		if *after, err = settledSnapshot(ctx); err != nil {
			return held, 0, 0, err
		}
		return held, restart, sync, global.restart(ctx, b.cfg.serverFlags, notPeering)
	}
	exportsOnly := []schema.GroupVersionResource{curatedTypes[0].gvr}
	both := []schema.GroupVersionResource{curatedTypes[0].gvr, curatedTypes[1].gvr}

	progress("relays, curated: controls: restarting %s with its peer while %s holds nothing, %s passing on only %s, then everything", curatedGlobal, curatedRegion, curatedRegion, curatedTypes[0].gvr.GroupResource())
	// The region holds no shard yet, so global cannot tell a read of the
	// type not passed on which home it covers: the controls do not ask.
	if _, _, _, err := measure(&res.subset.controlBefore, &res.subset.controlAfter, exportsOnly, 0, false); err != nil {
		return res, fmt.Errorf("the subset's control: %w", err)
	}
	if err := restartRegion(nil); err != nil {
		return res, err
	}
	if _, _, _, err := measure(&res.all.controlBefore, &res.all.controlAfter, both, 0, false); err != nil {
		return res, fmt.Errorf("the control of everything: %w", err)
	}

	n := res.objects
	writers := &shardWriters{srv: region.srv, clients: map[string]*http.Client{}}
	if res.beforeLoad, err = settledSnapshot(ctx); err != nil {
		return res, err
	}
	progress("relays, curated: loading %d %s and %d %s at %s as their shards, %d concurrent, %s not peering", n, curatedTypes[0].gvr.Resource, n, curatedTypes[1].gvr.Resource, curatedRegion, b.cfg.loadConcurrency, curatedGlobal)
	for _, t := range curatedTypes {
		took, err := b.createTypedAt(ctx, writers, t.gvr, t.kind, "curated", n, b.cfg.loadConcurrency)
		if err != nil {
			return res, err
		}
		res.loadTime += took
	}
	if res.loaded, err = settledSnapshot(ctx); err != nil {
		return res, err
	}

	progress("relays, curated: everything: restarting %s with its peer %s; waiting for its %d copies", curatedGlobal, curatedRegion, 2*n)
	if res.all.held, res.all.restartTime, res.all.syncTime, err = measure(&res.all.before, &res.all.after, both, n, false); err != nil {
		return res, fmt.Errorf("everything: %w", err)
	}

	// The pass-on narrowed under a global that holds everything.
	progress("relays, curated: %s holding everything peers again; %s restarts passing on only %s", curatedGlobal, curatedRegion, curatedTypes[0].gvr.GroupResource())
	if err := global.restart(ctx, b.cfg.serverFlags, peering); err != nil {
		return res, err
	}
	if _, err := waitHeld(ctx, global, curatedRegion, both, n, false); err != nil {
		return res, err
	}
	if err := restartRegion(curatedPassOn()); err != nil {
		return res, err
	}
	if res.narrowedRefusal, err = waitRefused(ctx, global, curatedRegion, curatedTypes[1].gvr, metav1.ListOptions{}); err != nil {
		return res, fmt.Errorf("after the pass-on narrowed: %w", err)
	}
	if res.narrowedStored, err = global.storedCountOf(ctx, curatedTypes[1].gvr); err != nil {
		return res, err
	}
	if res.narrowed, err = settledSnapshot(ctx); err != nil {
		return res, err
	}

	// The subset, on an emptied etcd: global restarts without peers, then
	// on a wiped data directory.
	progress("relays, curated: subset: %s emptied (its etcd wiped), then restarted with its peer %s; waiting for its %d copies of %s", curatedGlobal, curatedRegion, n, curatedTypes[0].gvr.Resource)
	if err := global.restart(ctx, b.cfg.serverFlags, notPeering); err != nil {
		return res, err
	}
	global.admin.CloseIdleConnections()
	if err := global.srv.RestartWithEtcdData(ctx, cachetest.WipeDir); err != nil {
		return res, fmt.Errorf("emptying %s: %w", curatedGlobal, err)
	}
	if res.subset.held, res.subset.restartTime, res.subset.syncTime, err = measure(&res.subset.before, &res.subset.after, exportsOnly, n, true); err != nil {
		return res, fmt.Errorf("the subset: %w", err)
	}
	return res, nil
}

// Settling: a cache server stopped or restarted in this process frees
// some of its memory only after it returned (goroutines that drain), so a
// snapshot right after a restart counts memory that goes away during the
// measurement. settledSnapshot waits settleFirst, then snapshots every
// settleEvery until two in a row differ by less than settleWithin in heap,
// settleTries at most.
const (
	settleFirst  = 2 * time.Second
	settleEvery  = time.Second
	settleWithin = 512 << 10
	settleTries  = 8
)

func settledSnapshot(ctx context.Context) (memSnapshot, error) {
	select {
	case <-ctx.Done():
		return memSnapshot{}, ctx.Err()
	case <-time.After(settleFirst):
	}
	prev, err := takeMemSnapshot()
	if err != nil {
		return prev, err
	}
	for range settleTries {
		select {
		case <-ctx.Done():
			return memSnapshot{}, ctx.Err()
		case <-time.After(settleEvery):
		}
		next, err := takeMemSnapshot()
		if err != nil {
			return next, err
		}
		d := int64(next.HeapAlloc) - int64(prev.HeapAlloc)
		if d < settleWithin && d > -settleWithin {
			return next, nil
		}
		prev = next
	}
	return prev, nil
}

// waitHeld waits until cache c holds want objects of each type of passed
// of home's data, and none of the other curated types: each passed type
// stored want times in its etcd and listed consistently (*/*) with want
// items, each other type stored nowhere and, when refusals is set, refused
// by a consistent and a resourceVersion=0 */* LIST with 503 NotPassedOn
// naming home.
func waitHeld(ctx context.Context, c *regionCache, home string, passed []schema.GroupVersionResource, want int, refusals bool) (curatedHeld, error) {
	held := curatedHeld{listed: map[string]int{}, stored: map[string]int64{}, refused: map[string][]string{}}
	last := "not checked"
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, regionsSyncTimeout, true, func(ctx context.Context) (bool, error) {
		for _, t := range curatedTypes {
			gr := t.gvr.GroupResource().String()
			isPassed := false
			for _, p := range passed {
				isPassed = isPassed || p == t.gvr
			}
			stored, err := c.storedCountOf(ctx, t.gvr)
			if err != nil {
				last = err.Error()
				return false, nil
			}
			held.stored[gr] = stored
			if !isPassed {
				if stored != 0 {
					return false, fmt.Errorf("%s's etcd holds %d %s, which is not passed on to it", c.name, stored, gr)
				}
				if !refusals {
					continue
				}
				held.refused[gr] = nil
				for _, opts := range []metav1.ListOptions{{}, {ResourceVersion: "0"}} {
					msg, err := refusedNotPassedOn(ctx, c, home, t.gvr, opts)
					if err != nil {
						// Until global has read the region's table and
						// claims, a read may answer otherwise.
						last = err.Error()
						return false, nil
					}
					held.refused[gr] = append(held.refused[gr], msg)
				}
				continue
			}
			if stored != int64(want) {
				last = fmt.Sprintf("%d of %d %s stored", stored, want, gr)
				return false, nil
			}
			all, err := c.resourceOf(everything, t.gvr)
			if err != nil {
				return false, err
			}
			l, err := all.List(ctx, listConsistent)
			if err != nil {
				last = err.Error()
				return false, nil
			}
			if len(l.Items) != want {
				last = fmt.Sprintf("a consistent */* LIST of %s returns %d of %d", gr, len(l.Items), want)
				return false, nil
			}
			held.listed[gr] = len(l.Items)
		}
		return true, nil
	})
	if err != nil {
		return held, fmt.Errorf("waiting for cache %s to hold %d of each of %v (last: %s): %w", c.name, want, passed, last, err)
	}
	return held, nil
}

// errNotRefused: a read answered otherwise than 503 NotPassedOn.
var errNotRefused = errors.New("not refused with 503 NotPassedOn")

// refusedNotPassedOn LISTs gvr */* at c with opts and returns the refusal's
// message, when it is a 503 with a NotPassedOn cause naming home.
func refusedNotPassedOn(ctx context.Context, c *regionCache, home string, gvr schema.GroupVersionResource, opts metav1.ListOptions) (string, error) {
	all, err := c.resourceOf(everything, gvr)
	if err != nil {
		return "", err
	}
	l, err := all.List(ctx, opts)
	what := fmt.Sprintf("a */* LIST of %s at %s (resourceVersion %q)", gvr.GroupResource(), c.name, opts.ResourceVersion)
	if err == nil {
		return "", fmt.Errorf("%s answered %d items: %w", what, len(l.Items), errNotRefused)
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) || status.Status().Code != http.StatusServiceUnavailable {
		return "", fmt.Errorf("%s: %v: %w", what, err, errNotRefused)
	}
	if d := status.Status().Details; d != nil {
		for _, cause := range d.Causes {
			if string(cause.Type) == mirror.ReasonNotPassedOn && cause.Field == home {
				return status.Status().Message, nil
			}
		}
	}
	return "", fmt.Errorf("%s: %v, causes %+v: %w", what, err, status.Status().Details, errNotRefused)
}

// waitRefused waits until a */* LIST of gvr at c answers 503 NotPassedOn
// naming home, and returns the refusal's message.
func waitRefused(ctx context.Context, c *regionCache, home string, gvr schema.GroupVersionResource, opts metav1.ListOptions) (string, error) {
	var msg string
	last := "not read"
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, regionsSyncTimeout, true, func(ctx context.Context) (bool, error) {
		m, err := refusedNotPassedOn(ctx, c, home, gvr, opts)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		msg = m
		return true, nil
	})
	if err != nil {
		return "", fmt.Errorf("waiting for cache %s to refuse %s with NotPassedOn (last: %s): %w", c.name, gvr.GroupResource(), last, err)
	}
	return msg, nil
}

// storedText renders the copies global's etcd stored, per curated type.
func storedText(h curatedHeld) string {
	parts := make([]string, 0, len(curatedTypes))
	for _, t := range curatedTypes {
		parts = append(parts, fmt.Sprintf("%s %d", t.gvr.Resource, h.stored[t.gvr.GroupResource().String()]))
	}
	return strings.Join(parts, ", ")
}

// curatedRows adds the measurement's rows, 12w-12y.
func (b *bench) curatedRows(res curatedResult) {
	all, sub := res.all, res.subset
	exports, schemas := curatedTypes[0].gvr.GroupResource().String(), curatedTypes[1].gvr.GroupResource().String()
	heldText := func(h curatedHeld) string {
		parts := []string{}
		for _, t := range curatedTypes {
			gr := t.gvr.GroupResource().String()
			if v, ok := h.listed[gr]; ok {
				parts = append(parts, fmt.Sprintf("%s %d", t.gvr.Resource, v))
			} else {
				parts = append(parts, fmt.Sprintf("%s: 503 NotPassedOn, consistent and resourceVersion=0", t.gvr.Resource))
			}
		}
		return fmt.Sprintf("%d objects (%s)", h.total(), strings.Join(parts, "; "))
	}
	first := func(msgs []string) string {
		if len(msgs) == 0 {
			return ""
		}
		return msgs[0]
	}
	b.rep.add(&row{
		ID: "12w", Metric: fmt.Sprintf("relays, curated: objects the upstream %s holds of its region's %d (%d of each of 2 types)", curatedGlobal, 2*res.objects, res.objects),
		Cache: heldText(sub.held) + ", --pass-on=" + curatedPassOn()[0] + " at " + curatedRegion, Baseline: heldText(all.held) + ", everything passed on",
		CacheValue: float64(sub.held.total()), BaselineValue: float64(all.held.total()), Unit: "objects",
		Ratio: ratio(float64(sub.held.total()), float64(all.held.total())),
		RatioMeaning: fmt.Sprintf("items of consistent */* LISTs at %s, per type, once its etcd stored as many copies of each (copies stored, subset: %s; everything: %s); in the subset the type not passed on was stored nowhere, and its */* LISTs, consistent and resourceVersion=0, answered 503 with a NotPassedOn cause naming %s (%q)",
			curatedGlobal, storedText(sub.held), storedText(all.held), curatedRegion, first(sub.held.refused[schemas])),
		Details: map[string]interface{}{"subset_listed": sub.held.listed, "subset_stored": sub.held.stored, "subset_refused": sub.held.refused,
			"everything_listed": all.held.listed, "everything_stored": all.held.stored},
	})

	homeN := float64(2 * res.objects)
	growth := func(s curatedState, f func(memSnapshot) uint64) (net, control float64) {
		control = float64(f(s.controlAfter)) - float64(f(s.controlBefore))
		return float64(f(s.after)) - float64(f(s.before)) - control, control
	}
	heap := func(m memSnapshot) uint64 { return m.HeapAlloc }
	rss := func(m memSnapshot) uint64 { return m.VmRSS }
	anon := func(m memSnapshot) uint64 { return m.RssAnon }
	for _, x := range []struct {
		id, what string
		get      func(memSnapshot) uint64
		more     string
	}{
		{"12x", "heap", heap, "live heap (runtime.MemStats.HeapAlloc after two GCs)"},
		{"12y", "RSS", rss, "VmRSS, etcd's mmapped files included"},
	} {
		subNet, subControl := growth(sub, x.get)
		allNet, allControl := growth(all, x.get)
		subPer, allPer := subNet/float64(sub.held.total()), allNet/float64(all.held.total())
		subAnon, _ := growth(sub, anon)
		allAnon, _ := growth(all, anon)
		homePer := (float64(x.get(res.loaded)) - float64(x.get(res.beforeLoad))) / homeN
		b.rep.add(&row{
			ID: x.id, Metric: fmt.Sprintf("relays, curated: %s of the upstream %s's copies, subset against everything", x.what, curatedGlobal),
			Cache:      fmt.Sprintf("%s, %.0f B per held object (%d)", mibOf(subNet), subPer, sub.held.total()),
			Baseline:   fmt.Sprintf("%s, %.0f B per held object (%d), everything", mibOf(allNet), allPer, all.held.total()),
			CacheValue: subNet, BaselineValue: allNet, Unit: "bytes",
			Ratio: ratio(subNet, allNet),
			RatioMeaning: fmt.Sprintf("%s growth of the whole process while %s restarted with its peer %s and copied what it holds (the subset: only %s, %s passing on only them; everything: %s and %s), net of each state's control (the same restart while %s held nothing: subset %s, everything %s), subset ÷ everything; per held object %.2f; before subtracting the controls %.0f and %.0f B per held object; anonymous memory %.0f and %.0f B per held object; %s took its %d objects from their shards at %.0f B per object, %s not peering; %s",
				x.what, curatedGlobal, curatedRegion, exports, curatedRegion, exports, schemas, curatedRegion, mibSigned(subControl), mibSigned(allControl),
				ratio(subPer, allPer), (subNet+subControl)/float64(sub.held.total()), (allNet+allControl)/float64(all.held.total()),
				subAnon/float64(sub.held.total()), allAnon/float64(all.held.total()), curatedRegion, 2*res.objects, homePer, curatedGlobal, x.more),
			Details: map[string]interface{}{
				"subset":     map[string]uint64{"control_before": x.get(sub.controlBefore), "control_after": x.get(sub.controlAfter), "before": x.get(sub.before), "after": x.get(sub.after)},
				"everything": map[string]uint64{"control_before": x.get(all.controlBefore), "control_after": x.get(all.controlAfter), "before": x.get(all.before), "after": x.get(all.after)},
				"region":     map[string]uint64{"before_load": x.get(res.beforeLoad), "loaded": x.get(res.loaded)},
				"narrowed":   x.get(res.narrowed),
			},
		})
	}
	originsOf := func(s curatedState) string {
		n := float64(s.held.total())
		return formatOrigins(netGrowth(growthByOrigin(s.before, s.after, n), growthByOrigin(s.controlBefore, s.controlAfter, n)))
	}
	b.rep.note("relays, curated: %s's heap growth per held object by origin (sampled heap profile, estimates; net of the control): subset %s; everything %s", curatedGlobal, originsOf(sub), originsOf(all))
	b.rep.note("relays, curated: after the everything state, %s went on peering while %s restarted with --pass-on=%s: %s then answered a consistent */* LIST of %s 503 (%q) and its etcd still held %d copies of it (process heap %s, RSS %s against the everything state's measurement); the subset state is measured on %s restarted on an emptied etcd",
		curatedGlobal, curatedRegion, curatedPassOn()[0], curatedGlobal, schemas, res.narrowedRefusal, res.narrowedStored,
		mibSigned(float64(res.narrowed.HeapAlloc)-float64(all.after.HeapAlloc)), mibSigned(float64(res.narrowed.VmRSS)-float64(all.after.VmRSS)), curatedGlobal)
	b.rep.Environment["relays_curated"] = fmt.Sprintf("%s and %s started in %s; %d objects loaded at %s in %s (%d concurrent clients, as their shards); %s restarted with its peer in %s and held everything %s later; on an emptied etcd, in %s and held the subset %s later",
		curatedGlobal, curatedRegion, res.startTime.Round(time.Millisecond), 2*res.objects, curatedRegion, res.loadTime.Round(time.Millisecond), b.cfg.loadConcurrency,
		curatedGlobal, all.restartTime.Round(time.Millisecond), all.syncTime.Round(time.Millisecond), sub.restartTime.Round(time.Millisecond), sub.syncTime.Round(time.Millisecond))
	b.rep.note("relays, curated: two more cache servers (%s, the home of its shards' partitions; %s, its upstream), each with its own embedded etcd with fsync, in this process beside the bench's own, after the chain stopped; %s peers with %s throughout, %s with %s from each measurement's restart on", curatedRegion, curatedGlobal, curatedRegion, curatedGlobal, curatedGlobal, curatedRegion)
}
