package mirror

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
)

// TestWritersBoundAndStopAtFirstFailure: no more than n writes run at once;
// once one failed, no write starts, the others' context ends, and wait
// returns the failure, so that converge returns before the stream
// advances its revision.
func TestWritersBoundAndStopAtFirstFailure(t *testing.T) {
	const n = 4
	ctx, w := newWriters(context.Background(), n)
	var running, most, started atomic.Int64
	release := make(chan struct{})
	failed := errors.New("write failed")
	for i := range n {
		if err := w.do(func() error {
			started.Add(1)
			r := running.Add(1)
			for m := most.Load(); r > m && !most.CompareAndSwap(m, r); m = most.Load() {
			}
			<-release
			running.Add(-1)
			if i == 0 {
				return failed
			}
			<-ctx.Done()
			return ctx.Err()
		}); err != nil {
			t.Fatalf("write %d not started: %v", i, err)
		}
	}
	close(release)
	if err := w.wait(); !errors.Is(err, failed) {
		t.Fatalf("wait: %v, want the first failure", err)
	}
	if err := w.do(func() error { started.Add(1); return nil }); !errors.Is(err, failed) {
		t.Fatalf("a write after the failure: %v, want the failure", err)
	}
	w.stop()
	if got := started.Load(); got != n {
		t.Fatalf("%d writes started, want %d (none after the failure)", got, n)
	}
	if got := most.Load(); got > n {
		t.Fatalf("%d writes at once, want at most %d", got, n)
	}
}
