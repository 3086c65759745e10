package integration_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kcp-cache/kcp-cache/cache/options"
	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
	"github.com/kcp-cache/kcp-cache/cache/server/ports"
)

// kcp's cache-server flags that mean something take effect on a running
// server: --synthetic-delay holds every request back, health checks
// included; --authorization-always-allow-paths opens non-resource paths to
// anonymous clients and nothing else; --profiler-address serves pprof.
func TestKcpFlagsTakeEffect(t *testing.T) {
	if testing.Short() {
		t.Skip("long scenario (starts the server with every kcp flag): skipped with -short")
	}
	const delay = 200 * time.Millisecond
	profilerPort, err := ports.Reserve()
	if err != nil {
		t.Fatal(err)
	}
	profiler := fmt.Sprintf("127.0.0.1:%d", profilerPort)
	srv := cachetest.StartServer(t, cachetest.WithFlags(func(o *options.Options) {
		o.SyntheticDelay = delay
		o.Authorization.AlwaysAllowPaths = []string{"/metrics"}
		o.ProfilerAddress = profiler
	}))
	anonymous := srv.AnonymousConfig()

	for _, tt := range []struct {
		path string
		want int
	}{
		{"/readyz", http.StatusOK},
		{"/metrics", http.StatusOK},
		// Not listed: still needs credentials.
		{"/openapi/v3", http.StatusUnauthorized},
		// Resource requests are never opened by the path list.
		{scopedPath("*", "*", "/apis/apis.kcp.io/v1alpha2/apiexports"), http.StatusUnauthorized},
	} {
		started := time.Now()
		code, _ := call(t, anonymous, http.MethodGet, tt.path, "")
		if took := time.Since(started); took < delay {
			t.Errorf("GET %s answered after %s, before the synthetic delay of %s", tt.path, took, delay)
		}
		if code != tt.want {
			t.Errorf("anonymous GET %s = %d, want %d", tt.path, code, tt.want)
		}
	}

	resp, err := http.Get("http://" + profiler + "/debug/pprof/goroutine?debug=1")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "goroutine profile:") {
		t.Errorf("profiler at %s: %d %.100q", profiler, resp.StatusCode, body)
	}
}
