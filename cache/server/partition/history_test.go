package partition

import (
	"context"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/storage"
	clocktesting "k8s.io/utils/clock/testing"
)

// watchSource is a storage whose Watch hands out one fake watcher; nothing
// else of it is used by cacherSource.
type watchSource struct {
	storage.Interface
	fake *watch.FakeWatcher
}

func (s watchSource) Watch(context.Context, string, storage.ListOptions) (watch.Interface, error) {
	return s.fake, nil
}

func next(t *testing.T, ch <-chan watch.Event) (watch.Event, bool) {
	t.Helper()
	select {
	case ev, ok := <-ch:
		return ev, ok
	case <-time.After(10 * time.Second):
		t.Fatal("no event within 10s")
		return watch.Event{}, false
	}
}

func TestHistoryIsReleasedAfterMassDeletionAndQuiet(t *testing.T) {
	clock := clocktesting.NewFakeClock(time.Now())
	fake := watch.NewFake()
	s := newCacherSource(watchSource{fake: fake}, "things", HistoryTrim{MinDeletes: 3, Idle: time.Minute, Clock: clock}, nil)

	if w, _ := s.Watch(context.Background(), "/p", storage.ListOptions{}); w != watch.Interface(fake) {
		t.Fatalf("a watch without progress notifications (a client's) was wrapped")
	}
	w, err := s.Watch(context.Background(), "/p", storage.ListOptions{ProgressNotify: true})
	if err != nil {
		t.Fatal(err)
	}
	obj := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"kcp.io/shard": "s", "kcp.io/cluster": "c"}}}
	for i := 0; i < 2; i++ {
		go fake.Delete(obj)
		if ev, _ := next(t, w.ResultChan()); ev.Type != watch.Deleted {
			t.Fatalf("got %s, want the forwarded delete", ev.Type)
		}
	}
	clock.Step(2 * time.Minute)
	s.maybeTrim("things")
	// Two deletions are not worth a relist: the watch goes on.
	go fake.Delete(obj)
	if ev, _ := next(t, w.ResultChan()); ev.Type != watch.Deleted {
		t.Fatalf("got %s after too few deletions, want the watch to go on", ev.Type)
	}

	// Three deletions, but not quiet long enough.
	clock.Step(30 * time.Second)
	s.maybeTrim("things")
	go fake.Add(obj)
	if ev, _ := next(t, w.ResultChan()); ev.Type != watch.Added {
		t.Fatalf("got %s before the idle period, want the watch to go on", ev.Type)
	}

	// An add does not reset the deletions, but restarts the idle period.
	clock.Step(59 * time.Second)
	s.maybeTrim("things")
	clock.Step(2 * time.Second)
	s.maybeTrim("things")
	ev, _ := next(t, w.ResultChan())
	status, ok := ev.Object.(*metav1.Status)
	if ev.Type != watch.Error || !ok || !apierrors.IsResourceExpired(apierrors.FromObject(status)) {
		t.Fatalf("got %s %v, want a resource-expired error", ev.Type, ev.Object)
	}
	if _, open := next(t, w.ResultChan()); open {
		t.Errorf("the watch stayed open after expiring")
	}
	if !fake.IsStopped() {
		t.Errorf("the underlying watch was not stopped")
	}
}
