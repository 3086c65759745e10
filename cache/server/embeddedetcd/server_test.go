package embeddedetcd

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Data survives a restart on the same directory, the directory is private,
// and revisions keep growing (the cache's resourceVersions).
func TestRestartKeepsDataAndRevisions(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	put := func(key string) int64 {
		t.Helper()
		_, c, stop := startAlone(ctx, t, dir)
		defer stop()
		if got, err := c.Get(ctx, "first"); err != nil || (key != "first" && len(got.Kvs) != 1) {
			t.Fatalf("after a restart the earlier key is gone (err=%v)", err)
		}
		resp, err := c.Put(ctx, key, "v")
		if err != nil {
			t.Fatal(err)
		}
		return resp.Header.Revision
	}
	first := put("first")
	second := put("second")
	if second <= first {
		t.Errorf("revision went from %d to %d across a restart", first, second)
	}
	info, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if perm := info.Mode().Perm(); perm != 0o700 {
		t.Errorf("data directory mode %o, want 700", perm)
	}
}

func TestWithPortsFillsOnlyZeroPorts(t *testing.T) {
	cfg, err := Config{ClientPort: 12345}.WithPorts()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ClientPort != 12345 || cfg.PeerPort == 0 || cfg.PeerPort == cfg.ClientPort {
		t.Errorf("ports = %d/%d", cfg.ClientPort, cfg.PeerPort)
	}
	if cfg.ClientURL() != "http://127.0.0.1:12345" {
		t.Errorf("client URL %s", cfg.ClientURL())
	}
}

func TestStartNeedsADirectory(t *testing.T) {
	if _, err := Start(context.Background(), Config{}); err == nil {
		t.Fatal("Start without a directory must fail")
	}
}

// With TLS, the member serves only clients holding its CA's certificate: a
// plain-HTTP client, a TLS client without a certificate and one with a
// certificate of another CA can neither read nor write; fresh certificates
// at a restart still open the same data.
func TestTLSMemberAcceptsOnlyItsClient(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	start := func() (*Server, TLSFiles) {
		t.Helper()
		files, err := GenerateTLS(filepath.Join(dir, "certs"))
		if err != nil {
			t.Fatal(err)
		}
		srv, err := Start(ctx, Config{Directory: filepath.Join(dir, "data"), UnsafeNoFsync: true, TLS: &files})
		if err != nil {
			t.Fatal(err)
		}
		return srv, files
	}
	srv, files := start()
	if !strings.HasPrefix(srv.ClientURL(), "https://127.0.0.1:") {
		t.Fatalf("client URL %s is not https on loopback", srv.ClientURL())
	}
	own, err := files.ClientTLSConfig()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := clientFor(t, own, srv.ClientURL()).Put(ctx, "k", "v"); err != nil {
		t.Fatalf("the server's own client cannot write: %v", err)
	}

	strangers := map[string]*tls.Config{"plain HTTP": nil}
	noCert, err := TLSFiles{CAFile: files.CAFile}.ClientTLSConfig()
	if err != nil {
		t.Fatal(err)
	}
	strangers["TLS without a client certificate"] = noCert
	other, err := GenerateTLS(filepath.Join(t.TempDir(), "other"))
	if err != nil {
		t.Fatal(err)
	}
	otherCfg, err := TLSFiles{CAFile: files.CAFile, ClientCertFile: other.ClientCertFile, ClientKeyFile: other.ClientKeyFile}.ClientTLSConfig()
	if err != nil {
		t.Fatal(err)
	}
	strangers["a certificate of another CA"] = otherCfg
	for name, cfg := range strangers {
		endpoint := srv.ClientURL()
		if cfg == nil {
			endpoint = "http://" + strings.TrimPrefix(endpoint, "https://")
		}
		c, err := NewClient([]string{endpoint}, cfg, 2*time.Second)
		if err != nil {
			continue // refused at dial: as good as refused at the request
		}
		reqCtx, reqCancel := context.WithTimeout(ctx, time.Second)
		if _, err := c.Get(reqCtx, "k"); err == nil {
			t.Errorf("%s: read the member", name)
		}
		if _, err := c.Put(reqCtx, "k", "stranger"); err == nil {
			t.Errorf("%s: wrote the member", name)
		}
		reqCancel()
		_ = c.Close()
	}
	srv.Close()

	srv, files = start()
	defer srv.Close()
	own, err = files.ClientTLSConfig()
	if err != nil {
		t.Fatal(err)
	}
	resp, err := clientFor(t, own, srv.ClientURL()).Get(ctx, "k")
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v" {
		t.Fatalf("after a restart with fresh certificates: %v %v", resp, err)
	}
}

// testDialTimeout is etcdtest.DialTimeout (that package imports this one).
const testDialTimeout = 5 * time.Second

// clientFor is etcdtest.Dial for this package's own tests: a client of the
// members at endpoints, over TLS when cfg is set, closed when the test ends.
func clientFor(t *testing.T, cfg *tls.Config, endpoints ...string) *clientv3.Client {
	t.Helper()
	c, err := NewClient(endpoints, cfg, testDialTimeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// A data directory created by a member without TLS (an older version of the
// server) opens with TLS: the upgrade keeps the data.
func TestPlainDataDirectoryRestartsWithTLS(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	data := filepath.Join(t.TempDir(), "data")
	plain, err := Start(ctx, Config{Directory: data, UnsafeNoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := clientFor(t, nil, plain.ClientURL()).Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	plain.Close()

	files, err := GenerateTLS(filepath.Join(t.TempDir(), "certs"))
	if err != nil {
		t.Fatal(err)
	}
	secured, err := Start(ctx, Config{Directory: data, UnsafeNoFsync: true, TLS: &files})
	if err != nil {
		t.Fatalf("restarting a plain member's data with TLS: %v", err)
	}
	defer secured.Close()
	own, err := files.ClientTLSConfig()
	if err != nil {
		t.Fatal(err)
	}
	resp, err := clientFor(t, own, secured.ClientURL()).Get(ctx, "k")
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("data after switching to TLS: %v %v", resp, err)
	}
}

// A member alone serves gRPC only on its client URL (etcd's own gRPC
// server, not grpc-go's ServeHTTP under net/http): etcd's HTTP endpoints,
// which a shared listener would answer there, are not.
func TestMemberAloneServesOnlyGRPCOnItsClientURL(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, c, stop := startAlone(ctx, t, t.TempDir())
	defer stop()
	if _, err := c.Put(ctx, "k", "v"); err != nil {
		t.Fatalf("gRPC on the client URL: %v", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.ClientURL()+"/version", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err == nil {
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Fatalf("GET /version on the client URL answered %d %q: etcd's HTTP endpoints share the gRPC listener", resp.StatusCode, body)
		}
	}
}

// startAlone starts a member alone on dir and a client of it; stop closes
// both.
func startAlone(ctx context.Context, t *testing.T, dir string) (*Server, *clientv3.Client, func()) {
	t.Helper()
	srv, err := Start(ctx, Config{Directory: dir, UnsafeNoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewClient([]string{srv.ClientURL()}, nil, testDialTimeout)
	if err != nil {
		srv.Close()
		t.Fatal(err)
	}
	return srv, c, func() { _ = c.Close(); srv.Close() }
}
