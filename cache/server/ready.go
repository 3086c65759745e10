package server

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
)

// WaitForPath polls path on the server cfg reaches, with cfg's credentials,
// until it answers 200 or timeout passes; use it with "/readyz" to wait for
// a server to be ready. The last answer or error is part of the error.
func WaitForPath(ctx context.Context, cfg *rest.Config, path string, timeout time.Duration) error {
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return err
	}
	defer client.CloseIdleConnections()
	last := "no answer"
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, cfg.Host+path, nil)
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
