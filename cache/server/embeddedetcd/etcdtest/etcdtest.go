// Package etcdtest starts an embedded etcd for the unit tests of packages
// that talk to etcd directly (removal, homerevision), which cannot use the
// server fixture cachetest: it imports them through the server.
package etcdtest

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/kcp-cache/kcp-cache/cache/server/embeddedetcd"
)

// Client starts an in-memory member with cfg (InMemory is set), and returns
// a client of it; both stop when the test ends.
func Client(t testing.TB, cfg embeddedetcd.Config) *clientv3.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg.InMemory = true
	srv, err := embeddedetcd.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.ClientURL()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}
