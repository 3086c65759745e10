package embeddedetcd

import (
	"context"
	"os"
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
		srv, err := Start(ctx, Config{Directory: dir, UnsafeNoFsync: true})
		if err != nil {
			t.Fatal(err)
		}
		defer srv.Close()
		c, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.ClientURL()}, DialTimeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
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
