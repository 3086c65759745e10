package cachetest

import (
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/client-go/rest"
)

// Process is a server running in this process: whatever has a Run that
// serves until its context ends (a cache server, a host with a mounted
// cache, the examples' shard stand-in).
type Process struct {
	cancel context.CancelFunc
	done   chan struct{}
	err    error // Run's result, once done is closed

	stopOnce sync.Once
}

// StartProcess calls run in the background and waits until /readyz answers
// 200 with ready's credentials. If run returns first, its error is returned
// and nothing keeps running. ctx bounds only the wait; the process runs
// until Stop.
func StartProcess(ctx context.Context, ready *rest.Config, run func(context.Context) error) (*Process, error) {
	return startProcess(ctx, ready, "/readyz", run)
}

// startProcess is StartProcess waiting for readyPath instead of /readyz.
func startProcess(ctx context.Context, ready *rest.Config, readyPath string, run func(context.Context) error) (*Process, error) {
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	p := &Process{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		p.err = run(runCtx)
	}()

	waitCtx, stopWaiting := context.WithCancel(ctx)
	defer stopWaiting()
	go func() {
		select {
		case <-p.done:
			stopWaiting()
		case <-waitCtx.Done():
		}
	}()
	if err := WaitForPath(waitCtx, ready, readyPath); err != nil {
		select {
		case <-p.done:
			return nil, fmt.Errorf("server stopped while starting: %w", p.err)
		default:
		}
		_ = p.Stop()
		return nil, err
	}
	return p, nil
}

// Stop ends the process's context, waits for Run to return and returns its
// error, or an error if Run does not return within DefaultTimeout. It is
// safe to call more than once; later calls return the same
// error.
func (p *Process) Stop() error {
	p.stopOnce.Do(func() {
		p.cancel()
		select {
		case <-p.done:
		case <-time.After(DefaultTimeout):
			p.err = fmt.Errorf("server did not stop within %s", DefaultTimeout)
		}
	})
	return p.err
}

// Done is closed when Run has returned, whether Stop ended it or not.
func (p *Process) Done() <-chan struct{} { return p.done }
