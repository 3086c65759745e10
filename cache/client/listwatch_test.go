package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/kcp-cache/kcp-cache/cache/client"
)

func TestObservedListerWatcherFreshness(t *testing.T) {
	clock := clocktesting.NewFakePassiveClock(time.Unix(100, 0))
	f := client.NewFreshness(clock)
	var listErr, watchErr error
	cont := ""
	lw := client.NewObservedListerWatcher(&cache.ListWatch{
		ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) {
			if listErr != nil {
				return nil, listErr
			}
			l := &unstructured.UnstructuredList{}
			l.SetContinue(cont)
			return l, nil
		},
		WatchFuncWithContext: func(context.Context, metav1.ListOptions) (watch.Interface, error) {
			if watchErr != nil {
				return nil, watchErr
			}
			return watch.NewRaceFreeFake(), nil
		},
	}, f, nil)
	ctx := context.Background()

	check := func(step string, wantLast time.Time, wantWatching bool) {
		t.Helper()
		last, watching := f.Get()
		if !last.Equal(wantLast) || watching != wantWatching {
			t.Errorf("%s: freshness (%v, %v), want (%v, %v)", step, last, watching, wantLast, wantWatching)
		}
	}
	check("initially", time.Time{}, false)

	listErr = errors.New("down")
	if _, err := lw.ListWithContext(ctx, metav1.ListOptions{}); err == nil {
		t.Fatal("want the list error")
	}
	check("after a failed list", time.Time{}, false)

	listErr, cont = nil, "more"
	if _, err := lw.ListWithContext(ctx, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	check("after a first page", time.Time{}, false)

	clock.SetTime(time.Unix(200, 0))
	cont = ""
	if _, err := lw.List(metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	check("after the last page", time.Unix(200, 0), false)

	w1, err := lw.WatchWithContext(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	check("with a watch", time.Unix(200, 0), true)
	w2, err := lw.Watch(metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w1.Stop()
	w1.Stop() // stopping twice must not count twice
	check("old watch stopped after the new one opened", time.Unix(200, 0), true)
	w2.Stop()
	check("all watches stopped", time.Unix(200, 0), false)

	watchErr = errors.New("refused")
	if _, err := lw.WatchWithContext(ctx, metav1.ListOptions{}); err == nil {
		t.Fatal("want the watch error")
	}
	check("after a failed watch", time.Unix(200, 0), false)
}

// TestInformerWatchingFollowsTheWatch runs a real reflector: the informer is
// watching while events flow, and not once its watch ended and the next one
// was refused.
func TestInformerWatchingFollowsTheWatch(t *testing.T) {
	clock := clocktesting.NewFakePassiveClock(time.Unix(100, 0))
	lw := newFakeLW("10", withRV(obj("amber", "root", "", "x", ""), "10"))
	inf := client.NewInformerWithClock(apiExportsGVR, lw, 0, clock)
	errs := make(chan error, 10)
	if err := inf.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) { errs <- err }); err != nil {
		t.Fatal(err)
	}
	h := newRecordingHandler()
	if _, err := inf.AddEventHandler(h); err != nil {
		t.Fatal(err)
	}
	runInformer(t, inf)
	w := lw.nextWatcher(t)
	// An event delivered through the watch proves the reflector holds it.
	w.Add(withRV(obj("amber", "root", "", "y", ""), "11"))
	h.expect(t, event{"add", "amber|root|x", true}, event{"add", "amber|root|y", false})
	if last, watching := inf.Freshness(); !watching || !last.Equal(time.Unix(100, 0)) {
		t.Errorf("while events flow: freshness (%v, %v), want (%v, true)", last, watching, time.Unix(100, 0))
	}

	clock.SetTime(time.Unix(200, 0))
	lw.refuseWatches(errors.New("refused"))
	// A 500 ends this watch; the reflector lists again, then fails to watch
	// and reports that to the handler.
	w.Error(&metav1.Status{Status: metav1.StatusFailure, Code: 500, Reason: metav1.StatusReasonInternalError, Message: "boom"})
	select {
	case err := <-errs:
		if err == nil || err.Error() != "refused" {
			t.Fatalf("watch error %v, want the refusal", err)
		}
	case <-time.After(timeout):
		t.Fatal("the refused watch was not reported")
	}
	if !w.IsStopped() {
		t.Error("the reflector did not stop the ended watch")
	}
	if last, watching := inf.Freshness(); watching || !last.Equal(time.Unix(200, 0)) {
		t.Errorf("after the relist, without a watch: freshness (%v, %v), want (%v, false)", last, watching, time.Unix(200, 0))
	}
}
