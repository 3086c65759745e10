package integration_test

import (
	"context"
	"crypto/tls"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"k8s.io/klog/v2"

	"github.com/kcp-cache/kcp-cache/cache/options"
	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
	"github.com/kcp-cache/kcp-cache/cache/server/embeddedetcd"
)

// The embedded etcd of a standalone server accepts only the server: a
// client on the same machine without the server's etcd certificate can
// neither read nor write, so nothing bypasses the API's checks.
func TestEmbeddedEtcdAcceptsOnlyTheServer(t *testing.T) {
	t.Parallel()
	ctx := klog.NewContext(testContext(t), klog.Background())
	srv := newWithEmbeddedEtcd(t, ctx)
	done := make(chan error, 1)
	go func() { done <- srv.PrepareRun().Run(ctx) }()
	defer func() { srv.Close(); <-done }()
	if err := cachetest.WaitForPath(ctx, srv.AdminConfig(), "/readyz"); err != nil {
		t.Fatal(err)
	}

	etcdURL := srv.EmbeddedEtcdURL()
	if !strings.HasPrefix(etcdURL, "https://127.0.0.1:") {
		t.Fatalf("embedded etcd at %s, want TLS on loopback", etcdURL)
	}
	// The server's own certificate works (so the refusals below are not an
	// accident of the test's client set-up).
	own, err := srv.EmbeddedEtcdTLS().ClientTLSConfig()
	if err != nil {
		t.Fatal(err)
	}
	tryEtcd := func(endpoint string, withServerCert bool) (readErr, writeErr error) {
		var tlsConfig *tls.Config
		if withServerCert {
			tlsConfig = own
		}
		client, err := embeddedetcd.NewClient([]string{endpoint}, tlsConfig, 2*time.Second)
		if err != nil {
			return err, err
		}
		defer client.Close()
		reqCtx, reqCancel := context.WithTimeout(ctx, time.Second)
		defer reqCancel()
		_, readErr = client.Get(reqCtx, options.DefaultEtcdPrefix, clientv3.WithPrefix())
		_, writeErr = client.Put(reqCtx, options.DefaultEtcdPrefix+"/stranger", "x")
		return readErr, writeErr
	}
	if r, w := tryEtcd(etcdURL, true); r != nil || w != nil {
		t.Fatalf("the server's etcd identity: read %v, write %v", r, w)
	}
	plain := "http://" + strings.TrimPrefix(etcdURL, "https://")
	if r, w := tryEtcd(plain, false); r == nil || w == nil {
		t.Errorf("a plain-HTTP client: read %v, write %v; want both refused", r, w)
	}
}
