package integration_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/kcp-cache/kcp-cache/cache/options"
	"github.com/kcp-cache/kcp-cache/cache/server"
	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
)

// newWithEmbeddedEtcd builds a standalone server whose New starts an
// embedded etcd, as examples/cache-server does.
func newWithEmbeddedEtcd(t *testing.T, ctx context.Context) *server.Server {
	t.Helper()
	srv := newFromOptions(t, ctx, func(*options.Options) {})
	if srv.EmbeddedEtcdURL() == "" {
		t.Fatal("New started no embedded etcd")
	}
	return srv
}

// newFromOptions builds a standalone server from the options'
// defaults, changed by adjust, on a loopback port of its own.
func newFromOptions(t *testing.T, ctx context.Context, adjust func(*options.Options)) *server.Server {
	t.Helper()
	opts := options.NewOptions()
	opts.RootDirectory = t.TempDir()
	opts.EmbeddedEtcd.ClientPort, opts.EmbeddedEtcd.PeerPort = 0, 0
	adjust(opts)
	listener, port, err := genericoptions.CreateListener("tcp", "127.0.0.1:0", net.ListenConfig{})
	if err != nil {
		t.Fatal(err)
	}
	opts.SecureServing.Listener, opts.SecureServing.BindPort = listener, port
	completed, err := opts.Complete()
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := server.NewConfig(completed)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := cfg.Complete().New(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return srv
}

// etcdListens reports whether anything accepts connections at the etcd's
// client URL.
func etcdListens(t *testing.T, clientURL string) bool {
	t.Helper()
	u, err := url.Parse(clientURL)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.DialTimeout("tcp", u.Host, time.Second)
	if err != nil {
		return false
	}
	_ = conn.Close()
	return true
}

// A host that fails between New and Run closes the server: the etcd New
// started stops, and the server cannot be run afterwards.
func TestCloseWithoutRunStopsEmbeddedEtcd(t *testing.T) {
	t.Parallel()
	ctx := klog.NewContext(testContext(t), klog.Background())
	srv := newWithEmbeddedEtcd(t, ctx)
	etcdURL := srv.EmbeddedEtcdURL()
	if !etcdListens(t, etcdURL) {
		t.Fatalf("embedded etcd at %s does not listen after New", etcdURL)
	}

	srv.Close()
	if etcdListens(t, etcdURL) {
		t.Errorf("embedded etcd at %s still listens after Close", etcdURL)
	}
	srv.Close() // a second Close is harmless
	if err := srv.PrepareRun().Run(ctx); !errors.Is(err, server.ErrClosed) {
		t.Errorf("Run after Close = %v, want ErrClosed", err)
	}
}

// closeEndsRun closes srv and checks that its Run, whose result done
// receives, returned nil before Close did.
func closeEndsRun(t *testing.T, srv *server.Server, done <-chan error) {
	t.Helper()
	srv.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run returned %v after Close, want nil", err)
		}
	default:
		t.Fatal("Close returned before Run did")
	}
}

// Close during Run ends Run, waits for it, and stops etcd after the server.
func TestCloseDuringRunEndsRun(t *testing.T) {
	t.Parallel()
	ctx := klog.NewContext(testContext(t), klog.Background())
	srv := newWithEmbeddedEtcd(t, ctx)
	etcdURL := srv.EmbeddedEtcdURL()
	done := make(chan error, 1)
	go func() { done <- srv.PrepareRun().Run(ctx) }()
	if err := cachetest.WaitForPath(ctx, srv.AdminConfig(), "/readyz"); err != nil {
		srv.Close()
		t.Fatal(err)
	}

	closeEndsRun(t, srv, done)
	if etcdListens(t, etcdURL) {
		t.Errorf("embedded etcd at %s still listens after Close", etcdURL)
	}
}

// A server closed before its CRD informer's first list has returned ends
// its Run, and nothing more. Upstream's own hook for that list
// (crd-informer-synced) would fail with the stop's error, and upstream ends
// the process on a failed post-start hook: kcp with the cache mounted, or
// this test binary. etcd stops after New, so the list cannot return before
// Close; /readyz shows the server's own hook for it still pending.
func TestCloseBeforeTheCRDInformerSyncedEndsOnlyRun(t *testing.T) {
	t.Parallel()
	ctx := klog.NewContext(testContext(t), klog.Background())
	cluster := cachetest.StartEtcdCluster(t, 1)
	srv := newFromOptions(t, ctx, cluster.Flags)
	cluster.Stop(0)
	done := make(chan error, 1)
	go func() { done <- srv.PrepareRun().Run(ctx) }()

	client, err := rest.HTTPClientFor(srv.AdminConfig())
	if err != nil {
		srv.Close()
		t.Fatal(err)
	}
	pending := "[-]poststarthook/" + server.CRDSourceHookName + " failed"
	var last string
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, cachetest.DefaultTimeout, true, func(ctx context.Context) (bool, error) {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.AdminConfig().Host+"/readyz?verbose", nil)
		resp, err := client.Do(req)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		last = fmt.Sprintf("%d %s", resp.StatusCode, body)
		// Upstream answers a failed /readyz with 500.
		return resp.StatusCode != http.StatusOK && strings.Contains(string(body), pending), nil
	}); err != nil {
		srv.Close()
		t.Fatalf("/readyz never reported %q while etcd was down: %v (last: %s)", pending, err, last)
	}

	closeEndsRun(t, srv, done)
}
