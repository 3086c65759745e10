package partition

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// fakeMajority is lost while lost is set.
type fakeMajority struct{ lost atomic.Bool }

func (m *fakeMajority) Lost() (bool, time.Time) { return m.lost.Load(), time.Now() }

func objectAt(rv string) *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "o", ResourceVersion: rv}}
}

// The cacher's watch, ended by etcd while the member is cut off from its
// majority, is not ended for the cacher: it resumes from the last revision
// it delivered once the majority is back. Ended with the majority present,
// it ends as before.
func TestMajorityWatchResumesWhereItStopped(t *testing.T) {
	majority := &fakeMajority{}
	first := watch.NewFake()
	var mu sync.Mutex
	var reopenedAt []string
	reopened := make(chan *watch.FakeWatcher, 1)
	w := newMajorityWatch(context.Background(), first, "10", majority, func(rv string) (watch.Interface, error) {
		mu.Lock()
		reopenedAt = append(reopenedAt, rv)
		mu.Unlock()
		f := watch.NewFake()
		reopened <- f
		return f, nil
	})
	defer w.Stop()

	go first.Add(objectAt("11"))
	if ev, _ := next(t, w.ResultChan()); ev.Type != watch.Added || resourceVersionOf(ev) != "11" {
		t.Fatalf("got %s at %q, want the forwarded add at 11", ev.Type, resourceVersionOf(ev))
	}

	majority.lost.Store(true)
	status := apierrors.NewInternalError(context.Canceled).Status()
	go first.Error(&status)
	// Held: the error is not passed on, and no watch is opened again while
	// the majority is lost.
	select {
	case f := <-reopened:
		t.Fatalf("the watch was opened again while the majority was lost (%v)", f)
	case ev := <-w.ResultChan():
		t.Fatalf("the cacher was told %s while the majority was lost", ev.Type)
	case <-time.After(3 * majorityRecheck):
	}

	majority.lost.Store(false)
	var second *watch.FakeWatcher
	select {
	case second = <-reopened:
	case <-time.After(10 * time.Second):
		t.Fatal("the watch was not opened again within 10 s of the majority's return")
	}
	mu.Lock()
	if len(reopenedAt) != 1 || reopenedAt[0] != "11" {
		t.Errorf("opened again at %v, want once at 11 (the last revision delivered)", reopenedAt)
	}
	mu.Unlock()
	go second.Modify(objectAt("12"))
	if ev, _ := next(t, w.ResultChan()); ev.Type != watch.Modified || resourceVersionOf(ev) != "12" {
		t.Fatalf("got %s at %q, want the resumed watch's change at 12", ev.Type, resourceVersionOf(ev))
	}

	// With the majority present, an error ends the watch as before.
	go second.Error(&status)
	if ev, _ := next(t, w.ResultChan()); ev.Type != watch.Error {
		t.Fatalf("got %s, want the error passed on", ev.Type)
	}
	if _, open := next(t, w.ResultChan()); open {
		t.Fatal("the watch did not end after the error")
	}
}
