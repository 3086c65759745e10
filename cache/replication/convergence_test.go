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
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))
	defer cancel()
	buffer := logger.GetSink().(ktesting.Underlier).GetBuffer()
	other := Key{GVR: exportsGVR, Cluster: "org", Name: "export"}
	c.initial.begin(map[Key]struct{}{exportKey(): {}, other: {}}, "epoch-1", time.Now())

	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		c.logProgress(ctx)
	}()
	c.initial.finished(exportKey())
	cachetest.Eventually(t, "a progress line", func(context.Context) error {
		if !hasLine(buffer.String(), "Replication convergence in progress", "done=1 total=2") {
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
	cachetest.Eventually(t, "a completion line", func(context.Context) error {
		if !hasLine(buffer.String(), "Replication converged in full", "keys=2", `cacheEpoch="epoch-1"`) {
			return errors.New("no completion line yet")
		}
		return nil
	})
	cancel()
	<-stopped
	if epoch, ok, running := c.initial.state(); epoch != "epoch-1" || !ok || running {
		t.Errorf("state = %q, %v, %v; want epoch-1, converged, not running", epoch, ok, running)
	}
}

func TestConvergenceRoundsRecordTheirEpoch(t *testing.T) {
	s := newConvergence()
	s.begin(map[Key]struct{}{exportKey(): {}}, "one", time.Now())
	s.finished(exportKey())
	<-s.doneCh
	s.begin(map[Key]struct{}{exportKey(): {}}, "two", time.Now())
	if epoch, ok, running := s.state(); epoch != "one" || !ok || !running {
		t.Fatalf("during the second round: state = %q, %v, %v; want the first round's epoch, running", epoch, ok, running)
	}
	if got := s.roundEpoch(); got != "two" {
		t.Fatalf("roundEpoch = %q, want two", got)
	}
	s.finished(exportKey())
	if epoch, _, running := s.state(); epoch != "two" || running {
		t.Fatalf("after the second round: state = %q, running %v; want two, done", epoch, running)
	}
}

func TestPendingKeysSurviveAChangeDuringAReconcile(t *testing.T) {
	p := newPendingKeys()
	p.add(exportKey())
	g := p.claim(exportKey())
	p.add(exportKey()) // changed while the reconcile ran
	p.done(exportKey(), g)
	if p.len() != 1 {
		t.Fatalf("pending = %d after a reconcile that missed a change; want 1", p.len())
	}
	p.done(exportKey(), p.claim(exportKey()))
	if p.len() != 0 {
		t.Fatalf("pending = %d after a complete reconcile; want 0", p.len())
	}
}

func TestInitialSyncWithNothingToDoIsDoneAtOnce(t *testing.T) {
	s := newConvergence()
	s.finished(exportKey()) // before begin: not counted, and no panic
	select {
	case <-s.doneCh:
		t.Fatal("done before begin")
	default:
	}
	s.begin(map[Key]struct{}{}, "", time.Now())
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
