package filters

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// A request is served after the delay; one whose client gives up first is
// not served at all.
func TestSyntheticDelay(t *testing.T) {
	const delay = 100 * time.Millisecond
	var served atomic.Int32
	h := WithSyntheticDelay(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { served.Add(1) }), delay)

	started := time.Now()
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/readyz", nil))
	if took := time.Since(started); took < delay || served.Load() != 1 {
		t.Errorf("served %d times after %s; want once, after at least %s", served.Load(), took, delay)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/readyz", nil).WithContext(ctx))
	if served.Load() != 1 {
		t.Errorf("a request whose client had gone was served")
	}
}
