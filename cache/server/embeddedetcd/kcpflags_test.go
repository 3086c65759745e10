package embeddedetcd

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/component-base/metrics/testutil"

	"github.com/kcp-cache/kcp-cache/cache/server/ports"
)

// kcp's embedded etcd flags reach etcd: the metrics listener serves etcd's
// metrics, the quota is etcd's and the server's quota gauge tells it, and the
// write-ahead log files have the size asked for (etcd preallocates each
// segment to exactly that size), once per process.
func TestKcpEmbeddedEtcdSettings(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	metricsPort, err := ports.Reserve()
	if err != nil {
		t.Fatal(err)
	}
	const segment = 1 << 20
	const quota = 96 << 20
	dir := t.TempDir()
	srv, err := Start(ctx, Config{
		Directory:           dir,
		UnsafeNoFsync:       true,
		WALSegmentSizeBytes: segment,
		QuotaBackendBytes:   quota,
		ListenMetricsURLs:   []string{fmt.Sprintf("http://127.0.0.1:%d", metricsPort)},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()

	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort))
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "etcd_server_has_leader") {
		t.Errorf("metrics listener: status %d, err %v, etcd metrics present: %t", resp.StatusCode, err, strings.Contains(string(body), "etcd_server_has_leader"))
	}
	if want := fmt.Sprintf("\netcd_server_quota_backend_bytes %g\n", float64(quota)); !strings.Contains(string(body), want) {
		t.Errorf("etcd's own metrics lack %q", strings.TrimSpace(want))
	}
	if got, err := testutil.GetGaugeMetricValue(quotaBytes); err != nil || got != quota {
		t.Errorf("kcp_cache_embedded_etcd_quota_bytes = %v (err %v), want %d", got, err, quota)
	}

	wals, err := filepath.Glob(filepath.Join(dir, "member", "wal", "*.wal"))
	if err != nil || len(wals) == 0 {
		t.Fatalf("no WAL files under %s (err %v)", dir, err)
	}
	for _, w := range wals {
		info, err := os.Stat(w)
		if err != nil {
			t.Fatal(err)
		}
		if info.Size() != segment {
			t.Errorf("%s is %d bytes, want the configured segment size %d", filepath.Base(w), info.Size(), segment)
		}
	}

	if _, err := Start(ctx, Config{Directory: t.TempDir(), UnsafeNoFsync: true, WALSegmentSizeBytes: 2 * segment}); err == nil || !strings.Contains(err.Error(), "WAL segment size") {
		t.Errorf("a second member asking for another WAL segment size: %v, want a refusal", err)
	}
}
