package server_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"k8s.io/klog/v2"

	"github.com/kcp-cache/kcp-cache/cache/server"
	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
)

// A server whose embedded etcd dies under it stops, and its Run says why:
// a host that embeds the cache learns that its etcd died, as etcd's own
// embed.Etcd.Err would tell it. (TestCloseDuringRunEndsRun shows that a
// server closed as usual, which stops its etcd last, returns nil.)
func TestRunEndsWhenTheEmbeddedEtcdStops(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(klog.NewContext(context.Background(), klog.Background()), cachetest.DefaultTimeout)
	defer cancel()
	var opts cachetest.Options
	cachetest.OwnEmbeddedEtcd(nil)(&opts)
	srv, err := cachetest.Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	// Its Run error is what this test checks; Stop would return it again.
	defer func() { _ = srv.Stop() }()
	if srv.Server().EmbeddedEtcdURL() == "" {
		t.Fatal("the server started no embedded etcd")
	}

	server.KillEmbeddedEtcd(srv.Server())
	select {
	case <-srv.Done():
	case <-ctx.Done():
		t.Fatalf("Run did not return within %s of its embedded etcd's kill", cachetest.DefaultTimeout)
	}
	err = srv.Halt()
	if !errors.Is(err, server.ErrEmbeddedEtcdStopped) || !strings.Contains(err.Error(), "etcd") {
		t.Fatalf("Run returned %v, want ErrEmbeddedEtcdStopped", err)
	}
	t.Logf("Run returned: %v", err)
}
