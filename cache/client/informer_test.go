package client_test

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/watchlist"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/kcp-cache/kcp-cache/cache/client"
	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
)

// timeout bounds every wait; waits end as soon as their event happens.
const timeout = cachetest.DefaultTimeout

var apiExportsGVR = schema.GroupVersionResource{Group: "apis.kcp.io", Version: "v1alpha1", Resource: "apiexports"}

// fakeLW serves lists from a settable set of objects and hands every watch it
// opens to the test.
type fakeLW struct {
	mu       sync.Mutex
	objs     []*unstructured.Unstructured
	rv       string
	watchErr error
	listOpts []metav1.ListOptions
	watchOps []metav1.ListOptions
	watchers chan *watch.RaceFreeFakeWatcher
}

func newFakeLW(rv string, objs ...*unstructured.Unstructured) *fakeLW {
	return &fakeLW{objs: objs, rv: rv, watchers: make(chan *watch.RaceFreeFakeWatcher, 10)}
}

func (f *fakeLW) set(rv string, objs ...*unstructured.Unstructured) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.objs, f.rv = objs, rv
}

// refuseWatches makes every later watch fail with err.
func (f *fakeLW) refuseWatches(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.watchErr = err
}

func (f *fakeLW) List(options metav1.ListOptions) (runtime.Object, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.listOpts = append(f.listOpts, options)
	list := &unstructured.UnstructuredList{}
	list.SetAPIVersion("apis.kcp.io/v1alpha1")
	list.SetKind("APIExportList")
	list.SetResourceVersion(f.rv)
	for _, o := range f.objs {
		list.Items = append(list.Items, *o.DeepCopy())
	}
	return list, nil
}

func (f *fakeLW) Watch(options metav1.ListOptions) (watch.Interface, error) {
	f.mu.Lock()
	f.watchOps = append(f.watchOps, options)
	err := f.watchErr
	f.mu.Unlock()
	if err != nil {
		return nil, err
	}
	w := watch.NewRaceFreeFake()
	f.watchers <- w
	return w, nil
}

func (f *fakeLW) options() (lists, watches []metav1.ListOptions) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]metav1.ListOptions(nil), f.listOpts...), append([]metav1.ListOptions(nil), f.watchOps...)
}

func (f *fakeLW) nextWatcher(t *testing.T) *watch.RaceFreeFakeWatcher {
	t.Helper()
	select {
	case w := <-f.watchers:
		return w
	case <-time.After(timeout):
		t.Fatal("no watch was opened")
		return nil
	}
}

// event is what a recordingHandler saw, rendered for comparison.
type event struct {
	kind    string
	key     string
	initial bool
}

func (e event) String() string { return fmt.Sprintf("%s %s initial=%v", e.kind, e.key, e.initial) }

// recordingHandler sends every event it receives to a channel.
type recordingHandler struct {
	events chan event
	// block, when set, holds OnAdd until it is closed.
	block chan struct{}
}

func newRecordingHandler() *recordingHandler {
	return &recordingHandler{events: make(chan event, 100)}
}

func keyOf(obj interface{}) string {
	k, err := client.KeyFunc(obj)
	if err != nil {
		return "!" + err.Error()
	}
	return k
}

func (h *recordingHandler) OnAdd(obj interface{}, initial bool) {
	if h.block != nil {
		<-h.block
	}
	h.events <- event{"add", keyOf(obj), initial}
}

func (h *recordingHandler) OnUpdate(_, obj interface{}) {
	h.events <- event{"update", keyOf(obj), false}
}

func (h *recordingHandler) OnDelete(obj interface{}) {
	kind := "delete"
	if _, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		kind = "delete-tombstone"
	}
	h.events <- event{kind, keyOf(obj), false}
}

// expect reads n events, in order, and compares them with want.
func (h *recordingHandler) expect(t *testing.T, want ...event) {
	t.Helper()
	for i, w := range want {
		select {
		case got := <-h.events:
			if got != w {
				t.Fatalf("event %d: got %v, want %v", i, got, w)
			}
		case <-time.After(timeout):
			t.Fatalf("event %d: timed out waiting for %v", i, w)
		}
	}
}

// expectUnordered reads len(want) events in any order.
func (h *recordingHandler) expectUnordered(t *testing.T, want ...event) {
	t.Helper()
	var got []string
	for range want {
		select {
		case e := <-h.events:
			got = append(got, e.String())
		case <-time.After(timeout):
			t.Fatalf("timed out after %v, want %v", got, want)
		}
	}
	wantS := make([]string, 0, len(want))
	for _, w := range want {
		wantS = append(wantS, w.String())
	}
	sort.Strings(got)
	sort.Strings(wantS)
	if !slices.Equal(got, wantS) {
		t.Fatalf("got %v, want %v", got, wantS)
	}
}

// noMoreEvents checks that the handler received nothing beyond what the
// test expected so far. The handler runs on the informer's goroutine, so an
// empty channel proves nothing; instead a sentinel object goes through w
// and must be the next event: events are delivered in order, so anything
// unexpected would arrive before it. The sentinel stays in the store, in a
// partition no test uses.
func (h *recordingHandler) noMoreEvents(t *testing.T, w *watch.RaceFreeFakeWatcher) {
	t.Helper()
	w.Add(withRV(obj("sentinel", "sentinel", "", "sentinel", ""), "999"))
	h.expect(t, event{"add", "sentinel|sentinel|sentinel", false})
}

// runInformer runs inf until the test ends, or until the returned stop is
// called, and waits for it to stop then; stop may be called more than once.
func runInformer(t *testing.T, inf *client.Informer) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		inf.RunWithContext(ctx)
	}()
	stop = func() {
		cancel()
		<-done
		if !inf.IsStopped() {
			t.Error("informer not stopped after Run returned")
		}
	}
	t.Cleanup(stop)
	return stop
}

func waitSynced(t *testing.T, checker cache.DoneChecker) {
	t.Helper()
	select {
	case <-checker.Done():
	case <-time.After(timeout):
		t.Fatalf("%s did not sync", checker.Name())
	}
}

func sameNamedObjects() []*unstructured.Unstructured {
	var objs []*unstructured.Unstructured
	for _, shard := range []string{"amber", "beige", "cyan"} {
		for _, cluster := range []string{"root", "org"} {
			objs = append(objs, withRV(obj(shard, cluster, "", "x", ""), "10"))
		}
	}
	return objs
}

func TestInformerKeepsSameNamedObjectsApart(t *testing.T) {
	lw := newFakeLW("10", sameNamedObjects()...)
	inf := client.NewInformerWithClock(apiExportsGVR, lw, 0, clocktesting.NewFakePassiveClock(time.Unix(100, 0)))
	h := newRecordingHandler()
	reg, err := inf.AddEventHandler(h)
	if err != nil {
		t.Fatal(err)
	}
	runInformer(t, inf)
	waitSynced(t, inf.HasSyncedChecker())
	waitSynced(t, reg.HasSyncedChecker())

	if got := inf.GetIndexer().ListKeys(); len(got) != 6 {
		t.Fatalf("store holds %d keys, want 6: %v", len(got), got)
	}
	var want []event
	for _, o := range sameNamedObjects() {
		want = append(want, event{"add", keyOf(o), true})
	}
	h.expectUnordered(t, want...)
	for _, cluster := range []string{"root", "org"} {
		if objs, err := client.ListByCluster(inf.GetIndexer(), cluster); err != nil || len(objs) != 3 {
			t.Errorf("cluster %s: %d objects, err %v; want 3", cluster, len(objs), err)
		}
	}
	if got := inf.LastSyncResourceVersion(); got != "10" {
		t.Errorf("LastSyncResourceVersion %q, want 10", got)
	}
}

// TestInformerNeverStreamsInitialList guards the watch-list opt-out: with
// client-go's defaults the reflector would open a sendInitialEvents watch
// before any list.
func TestInformerNeverStreamsInitialList(t *testing.T) {
	lw := newFakeLW("10", sameNamedObjects()...)
	inf := client.NewInformerWithClock(apiExportsGVR, lw, 0, clocktesting.NewFakePassiveClock(time.Unix(100, 0)))
	if !watchlist.DoesClientNotSupportWatchListSemantics(inf.ListerWatcher()) {
		t.Fatal("the informer's ListerWatcher does not declare watch-list unsupported")
	}
	runInformer(t, inf)
	waitSynced(t, inf.HasSyncedChecker())
	// The fake records a watch's options before handing it over.
	lw.nextWatcher(t)
	lists, watches := lw.options()
	if len(lists) == 0 {
		t.Fatal("the informer never listed")
	}
	for i, o := range append(lists, watches...) {
		if o.SendInitialEvents != nil {
			t.Errorf("request %d asked for sendInitialEvents=%v: %+v", i, *o.SendInitialEvents, o)
		}
	}
	for i, o := range watches {
		if o.ResourceVersion != "10" {
			t.Errorf("watch %d started at %q, want the list's resource version 10", i, o.ResourceVersion)
		}
	}
}

func TestInformerEvents(t *testing.T) {
	start := withRV(obj("amber", "root", "", "x", ""), "10")
	lw := newFakeLW("10", start)
	inf := client.NewInformerWithClock(apiExportsGVR, lw, 0, clocktesting.NewFakePassiveClock(time.Unix(100, 0)))
	h := newRecordingHandler()
	if _, err := inf.AddEventHandler(h); err != nil {
		t.Fatal(err)
	}
	runInformer(t, inf)
	w := lw.nextWatcher(t)
	h.expect(t, event{"add", "amber|root|x", true})

	same := withRV(obj("beige", "root", "", "x", ""), "11")
	w.Add(same)
	h.expect(t, event{"add", "beige|root|x", false})

	changed := withRV(start, "12")
	changed.SetLabels(map[string]string{"changed": "yes"})
	w.Modify(changed)
	h.expect(t, event{"update", "amber|root|x", false})
	got, err := client.GetByClusterAndName(inf.GetIndexer(), "root", "x")
	if err == nil {
		t.Fatalf("two shards claim cluster root, want ErrAmbiguous, got %v", got)
	}

	w.Delete(withRV(same, "13"))
	h.expect(t, event{"delete", "beige|root|x", false})
	got, err = client.GetByClusterAndName(inf.GetIndexer(), "root", "x")
	if err != nil {
		t.Fatal(err)
	}
	if got.GetLabels()["changed"] != "yes" {
		t.Errorf("store has a stale object: %v", got.GetLabels())
	}
	h.noMoreEvents(t, w)
}

// TestInformerRelist checks that a relist deletes what vanished, updates what
// changed and stays quiet about what did not.
func TestInformerRelist(t *testing.T) {
	keep := withRV(obj("amber", "root", "", "keep", ""), "10")
	change := withRV(obj("amber", "root", "", "change", ""), "10")
	gone := withRV(obj("beige", "root", "", "keep", ""), "10") // same name as keep, other shard
	lw := newFakeLW("10", keep, change, gone)
	inf := client.NewInformerWithClock(apiExportsGVR, lw, 0, clocktesting.NewFakePassiveClock(time.Unix(100, 0)))
	h := newRecordingHandler()
	if _, err := inf.AddEventHandler(h); err != nil {
		t.Fatal(err)
	}
	runInformer(t, inf)
	w := lw.nextWatcher(t)
	h.expectUnordered(t,
		event{"add", "amber|root|keep", true},
		event{"add", "amber|root|change", true},
		event{"add", "beige|root|keep", true})

	added := withRV(obj("cyan", "org", "", "keep", ""), "20")
	lw.set("20", keep, withRV(change, "20"), added)
	// 410 Gone makes the reflector list again.
	w.Error(&apierrors.NewResourceExpired("too old").ErrStatus)
	h.expectUnordered(t,
		event{"delete-tombstone", "beige|root|keep", false},
		event{"update", "amber|root|change", false},
		event{"add", "cyan|org|keep", false})
	keys := inf.GetIndexer().ListKeys()
	sort.Strings(keys)
	if want := []string{"amber|root|change", "amber|root|keep", "cyan|org|keep"}; !slices.Equal(keys, want) {
		t.Errorf("store keys %v, want %v", keys, want)
	}
	h.noMoreEvents(t, lw.nextWatcher(t))
}

func TestInformerLateHandlerGetsReplay(t *testing.T) {
	lw := newFakeLW("10", sameNamedObjects()...)
	inf := client.NewInformerWithClock(apiExportsGVR, lw, 0, clocktesting.NewFakePassiveClock(time.Unix(100, 0)))
	runInformer(t, inf)
	waitSynced(t, inf.HasSyncedChecker())
	w := lw.nextWatcher(t)

	h := newRecordingHandler()
	reg, err := inf.AddEventHandler(h)
	if err != nil {
		t.Fatal(err)
	}
	var want []event
	for _, o := range sameNamedObjects() {
		want = append(want, event{"add", keyOf(o), true})
	}
	h.expectUnordered(t, want...)
	waitSynced(t, reg.HasSyncedChecker())
	w.Add(withRV(obj("amber", "new", "", "x", ""), "11"))
	h.expect(t, event{"add", "amber|new|x", false})
}

func TestInformerSlowHandlerDelaysOnlyItself(t *testing.T) {
	lw := newFakeLW("10", withRV(obj("amber", "root", "", "x", ""), "10"))
	inf := client.NewInformerWithClock(apiExportsGVR, lw, 0, clocktesting.NewFakePassiveClock(time.Unix(100, 0)))
	slow, fast := newRecordingHandler(), newRecordingHandler()
	slow.block = make(chan struct{})
	slowReg, err := inf.AddEventHandler(slow)
	if err != nil {
		t.Fatal(err)
	}
	fastReg, err := inf.AddEventHandler(fast)
	if err != nil {
		t.Fatal(err)
	}
	runInformer(t, inf)
	w := lw.nextWatcher(t)
	w.Add(withRV(obj("beige", "root", "", "x", ""), "11"))
	fast.expect(t, event{"add", "amber|root|x", true}, event{"add", "beige|root|x", false})
	waitSynced(t, fastReg.HasSyncedChecker())
	waitSynced(t, inf.HasSyncedChecker())
	if slowReg.HasSynced() {
		t.Error("the blocked handler reports synced before it saw the initial list")
	}
	close(slow.block)
	slow.expect(t, event{"add", "amber|root|x", true}, event{"add", "beige|root|x", false})
	waitSynced(t, slowReg.HasSyncedChecker())
}

func TestInformerRemoveEventHandler(t *testing.T) {
	lw := newFakeLW("10")
	inf := client.NewInformerWithClock(apiExportsGVR, lw, 0, clocktesting.NewFakePassiveClock(time.Unix(100, 0)))
	removed, kept := newRecordingHandler(), newRecordingHandler()
	removedReg, err := inf.AddEventHandler(removed)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := inf.AddEventHandler(kept); err != nil {
		t.Fatal(err)
	}
	stop := runInformer(t, inf)
	w := lw.nextWatcher(t)
	if err := inf.RemoveEventHandler(removedReg); err != nil {
		t.Fatal(err)
	}
	if err := inf.RemoveEventHandler(removedReg); err != nil {
		t.Errorf("removing twice: %v", err)
	}
	w.Add(withRV(obj("amber", "root", "", "x", ""), "11"))
	kept.expect(t, event{"add", "amber|root|x", false})
	// The removed handler was stopped before the event was queued to anyone.
	// Every handler runs on a goroutine of its own, so a sentinel sent to
	// the others cannot prove that this one got nothing; a stopped informer
	// can, because Run returns only after its handler goroutines did.
	stop()
	select {
	case e := <-removed.events:
		t.Errorf("the removed handler got %v", e)
	default:
	}
}

func TestInformerLifecycleErrors(t *testing.T) {
	lw := newFakeLW("10")
	inf := client.NewInformerWithClock(apiExportsGVR, lw, 0, clocktesting.NewFakePassiveClock(time.Unix(100, 0)))
	if err := inf.SetTransform(func(o interface{}) (interface{}, error) { return o, nil }); err != nil {
		t.Fatalf("SetTransform before start: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		inf.RunWithContext(ctx)
	}()
	lw.nextWatcher(t)
	if err := inf.SetTransform(nil); err == nil {
		t.Error("SetTransform after start: want an error")
	}
	if err := inf.SetWatchErrorHandler(func(*cache.Reflector, error) {}); err == nil {
		t.Error("SetWatchErrorHandler after start: want an error")
	}
	cancel()
	<-done
	if !inf.IsStopped() {
		t.Error("IsStopped is false after Run returned")
	}
	if _, err := inf.AddEventHandler(newRecordingHandler()); err == nil {
		t.Error("AddEventHandler after stop: want an error")
	}
}

func TestInformerTransformKeepsKeys(t *testing.T) {
	lw := newFakeLW("10", sameNamedObjects()...)
	inf := client.NewInformerWithClock(apiExportsGVR, lw, 0, clocktesting.NewFakePassiveClock(time.Unix(100, 0)))
	if err := inf.SetTransform(func(o interface{}) (interface{}, error) {
		u := o.(*unstructured.Unstructured)
		u.SetManagedFields(nil)
		u.SetLabels(map[string]string{"transformed": "yes"})
		return u, nil
	}); err != nil {
		t.Fatal(err)
	}
	runInformer(t, inf)
	waitSynced(t, inf.HasSyncedChecker())
	for _, o := range inf.GetStore().List() {
		if o.(*unstructured.Unstructured).GetLabels()["transformed"] != "yes" {
			t.Errorf("%s not transformed", keyOf(o))
		}
	}
	if n := len(inf.GetStore().ListKeys()); n != 6 {
		t.Errorf("%d keys, want 6", n)
	}
}

func TestInformerResyncGoesToHandlersThatAsk(t *testing.T) {
	lw := newFakeLW("10", withRV(obj("amber", "root", "", "x", ""), "10"))
	// The reflector's resync timer runs on the real clock; one second is the
	// shortest period client-go honours.
	inf := client.NewInformerWithClock(apiExportsGVR, lw, time.Second, clocktesting.NewFakePassiveClock(time.Unix(100, 0)))
	wants, refuses := newRecordingHandler(), newRecordingHandler()
	if _, err := inf.AddEventHandler(wants); err != nil {
		t.Fatal(err)
	}
	if _, err := inf.AddEventHandlerWithResyncPeriod(refuses, 0); err != nil {
		t.Fatal(err)
	}
	runInformer(t, inf)
	wants.expect(t, event{"add", "amber|root|x", true}, event{"update", "amber|root|x", false})
	refuses.expect(t, event{"add", "amber|root|x", true})
	// The resync that wants got was queued to every handler before the
	// sentinel, so refuses would see it first.
	refuses.noMoreEvents(t, lw.nextWatcher(t))
}

func TestInformerFreshness(t *testing.T) {
	clock := clocktesting.NewFakePassiveClock(time.Unix(100, 0))
	lw := newFakeLW("10", withRV(obj("amber", "root", "", "x", ""), "10"))
	inf := client.NewInformerWithClock(apiExportsGVR, lw, 0, clock)
	if last, watching := inf.Freshness(); !last.IsZero() || watching {
		t.Fatalf("before running: %v %v", last, watching)
	}
	runInformer(t, inf)
	waitSynced(t, inf.HasSyncedChecker())
	if last, _ := inf.Freshness(); !last.Equal(time.Unix(100, 0)) {
		t.Errorf("last sync %v, want the list's time", last)
	}
}
