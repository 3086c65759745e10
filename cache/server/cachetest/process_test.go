package cachetest

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"k8s.io/client-go/rest"
)

// A server whose Run fails while starting is reported at once, with Run's
// error, not after the readiness timeout.
func TestStartProcessReturnsAnEarlyRunError(t *testing.T) {
	boom := errors.New("boom")
	unready := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer unready.Close()
	started := time.Now()
	_, err := StartProcess(context.Background(), &rest.Config{Host: unready.URL}, func(context.Context) error { return boom })
	if !errors.Is(err, boom) {
		t.Fatalf("StartProcess = %v, want Run's error %v", err, boom)
	}
	if d := time.Since(started); d > DefaultTimeout/2 {
		t.Errorf("the error came after %s, as if StartProcess had waited for readiness", d)
	}
}

// Stop ends Run's context and returns Run's error, every time it is called.
func TestStopReturnsRunsError(t *testing.T) {
	ready := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer ready.Close()
	failed := errors.New("shutdown failed")
	p, err := StartProcess(context.Background(), &rest.Config{Host: ready.URL}, func(ctx context.Context) error {
		<-ctx.Done()
		return failed
	})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := p.Stop(); !errors.Is(err, failed) {
			t.Errorf("Stop = %v, want Run's error %v", err, failed)
		}
	}
	select {
	case <-p.Done():
	default:
		t.Error("Done is open after Stop returned")
	}
}
