package mirror

import (
	"context"
	"sync"
)

// convergeWorkers is how many copies one stream's list writes at once. A
// copy's write is a request through the server's handler chain and an etcd
// commit, partly waiting: with writes in flight together, etcd commits them
// in shared batches and the apiserver's work overlaps. Each type has its
// own stream, so a mirror of several types writes more at once, all
// bounded by the server's own in-flight limits (the loopback client is
// exempt from client-side rates only). A first copy of 50,000 objects in 7
// types, with the next page fetched ahead (pageAhead): 33.0 s with 8,
// 28.1 s with 32, 27.9 s with 64 at a higher peak (779 MiB against 646):
// at 32 the CPU is the bound (docs/performance.md).
const convergeWorkers = 32

// writers runs a list's writes on a bounded number of goroutines and keeps
// the first error. Once a write failed, the others' context is cancelled
// and no more are started: the stream starts over with a list, and what
// landed meanwhile is only more of the list's state, which the next list
// converges again.
type writers struct {
	cancel context.CancelFunc
	slots  chan struct{}
	wg     sync.WaitGroup

	mu  sync.Mutex
	err error
}

// newWriters returns writers of at most n writes at once, and the context
// the writes are to use: it ends when ctx does or a write failed.
func newWriters(ctx context.Context, n int) (context.Context, *writers) {
	ctx, cancel := context.WithCancel(ctx)
	return ctx, &writers{cancel: cancel, slots: make(chan struct{}, n)}
}

// do starts write once a slot is free, and returns the first error of the
// writes so far (then write is not started).
func (w *writers) do(write func() error) error {
	if err := w.failed(); err != nil {
		return err
	}
	w.slots <- struct{}{}
	if err := w.failed(); err != nil {
		<-w.slots
		return err
	}
	w.wg.Go(func() {
		defer func() { <-w.slots }()
		if err := write(); err != nil {
			w.mu.Lock()
			if w.err == nil {
				w.err = err
			}
			w.mu.Unlock()
			w.cancel()
		}
	})
	return nil
}

func (w *writers) failed() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// wait waits for every write started and returns the first error.
func (w *writers) wait() error {
	w.wg.Wait()
	return w.failed()
}

// stop waits for every write started (none outlives the convergence that
// started it) and releases the context.
func (w *writers) stop() {
	w.wg.Wait()
	w.cancel()
}
