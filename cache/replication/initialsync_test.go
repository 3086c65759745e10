package replication

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
)

func TestInitialSyncLogsProgressAndCompletion(t *testing.T) {
	c := offlineController(t, "amber")
	c.progressInterval = time.Millisecond
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
	ctx := klog.NewContext(context.Background(), logger)
	buffer := logger.GetSink().(ktesting.Underlier).GetBuffer()
	other := Key{GVR: exportsGVR, Cluster: "org", Name: "export"}
	c.initial.begin(map[Key]struct{}{exportKey(): {}, other: {}}, time.Now())

	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		c.logProgress(ctx)
	}()
	c.initial.finished(exportKey())
	cachetest.Eventually(t, "a progress line", func(context.Context) error {
		if !hasLine(buffer.String(), "Initial replication in progress", "done=1 total=2") {
			return errors.New("no progress line with done=1 total=2 yet")
		}
		return nil
	})
	select {
	case <-c.InitialSyncDone():
		t.Fatal("initial sync reported done with a key pending")
	default:
	}
	c.initial.finished(other)
	<-c.InitialSyncDone()
	<-stopped
	if !hasLine(buffer.String(), "Initial replication complete", "keys=2") {
		t.Errorf("no completion line in:\n%s", buffer.String())
	}
}

func TestInitialSyncWithNothingToDoIsDoneAtOnce(t *testing.T) {
	s := newInitialSync()
	s.finished(exportKey()) // before begin: not counted, and no panic
	select {
	case <-s.doneCh:
		t.Fatal("done before begin")
	default:
	}
	s.begin(map[Key]struct{}{}, time.Now())
	<-s.doneCh
}

func TestLagTrackerKeepsTheOldestChange(t *testing.T) {
	l := newLagTracker()
	t0 := time.Unix(100, 0)
	l.observed(exportKey(), t0)
	l.observed(exportKey(), t0.Add(time.Second))
	claimed, ok := l.claim(exportKey())
	if !ok || !claimed.Equal(t0) {
		t.Fatalf("claim = %v, %v; want the first observation", claimed, ok)
	}
	// A change observed during the failed reconcile does not hide the older one.
	l.observed(exportKey(), t0.Add(2*time.Second))
	l.unclaim(exportKey(), claimed)
	if again, _ := l.claim(exportKey()); !again.Equal(t0) {
		t.Fatalf("after unclaim, claim = %v, want %v", again, t0)
	}
	if _, ok := l.claim(exportKey()); ok || l.pending() != 0 {
		t.Fatalf("a claimed observation must be gone")
	}
}

// hasLine is true when one line of log holds every part.
func hasLine(log string, parts ...string) bool {
	for _, line := range strings.Split(log, "\n") {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all {
			return true
		}
	}
	return false
}
