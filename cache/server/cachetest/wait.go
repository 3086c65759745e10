package cachetest

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

const (
	// DefaultTimeout bounds every wait of this package whose context has no
	// earlier deadline: a server becoming ready, a condition in Eventually.
	// It is generous because parallel tests share few cores.
	DefaultTimeout = time.Minute

	pollInterval = 50 * time.Millisecond
)

// WaitForPath polls path on the server cfg reaches, with cfg's credentials,
// until it answers 200, ctx ends or DefaultTimeout passes; use it with
// "/readyz" to wait for a server to be ready. The last answer or error is
// part of the error.
func WaitForPath(ctx context.Context, cfg *rest.Config, path string) error {
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return err
	}
	defer client.CloseIdleConnections()
	last := "no answer"
	err = wait.PollUntilContextTimeout(ctx, pollInterval, DefaultTimeout, true, func(ctx context.Context) (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, kcpcache.JoinHostPath(cfg.Host, path), nil)
		if err != nil {
			return false, err
		}
		resp, err := client.Do(req)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		_ = resp.Body.Close()
		last = resp.Status
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		return fmt.Errorf("%s%s did not answer 200 (last: %s): %w", cfg.Host, path, last, err)
	}
	return nil
}

// Poll calls f until it returns nil, ctx ends or DefaultTimeout passes;
// the error then includes f's last error.
func Poll(ctx context.Context, f func(ctx context.Context) error) error {
	return PollWithin(ctx, DefaultTimeout, f)
}

// PollWithin is Poll with its own timeout.
func PollWithin(ctx context.Context, timeout time.Duration, f func(ctx context.Context) error) error {
	last := fmt.Errorf("never checked")
	err := wait.PollUntilContextTimeout(ctx, pollInterval, timeout, true, func(ctx context.Context) (bool, error) {
		last = f(ctx)
		return last == nil, nil
	})
	if err != nil {
		return fmt.Errorf("%w; last: %v", err, last)
	}
	return nil
}

// Eventually polls f until it returns nil and fails the test with f's last
// error when DefaultTimeout passes. what names the condition in the failure.
func Eventually(t testing.TB, what string, f func(ctx context.Context) error) {
	t.Helper()
	EventuallyWithin(t, what, DefaultTimeout, f)
}

// EventuallyWithin is Eventually with its own timeout, for conditions that
// wait on upstream's own slow loops (a CRD's finalizer polls every 5 s and
// lists through the loaded watch cache).
func EventuallyWithin(t testing.TB, what string, timeout time.Duration, f func(ctx context.Context) error) {
	t.Helper()
	if err := PollWithin(context.Background(), timeout, f); err != nil {
		t.Fatalf("%s: not so within %s: %v", what, timeout, err)
	}
}
