package profiler

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
)

// The profiler answers on its own address with pprof's index and profiles,
// and the address is free again after Close.
func TestServesPprofUntilClosed(t *testing.T) {
	s, err := Start(context.Background(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{
		"/debug/pprof/":                  "goroutine",
		"/debug/pprof/goroutine?debug=1": "goroutine profile:",
		"/debug/pprof/cmdline":           "profiler.test",
	} {
		resp, err := http.Get("http://" + s.Addr() + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), want) {
			t.Errorf("GET %s: %d, body does not contain %q", path, resp.StatusCode, want)
		}
	}
	s.Close()
	l, err := net.Listen("tcp", s.Addr())
	if err != nil {
		t.Fatalf("the profiler's address is still taken after Close: %v", err)
	}
	_ = l.Close()
}

// A taken address is an error at once.
func TestTakenAddressIsAnError(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if s, err := Start(context.Background(), l.Addr().String()); err == nil {
		s.Close()
		t.Fatal("Start on a taken address succeeded")
	}
}
