// Package etcdtest is the tests' way to reach an etcd: Dial connects to
// running members, Client starts an in-memory one for the unit tests of
// packages that talk to etcd directly (removal, homerevision), which
// cannot use the server fixture cachetest: it imports them through the
// server.
package etcdtest

import (
	"context"
	"crypto/tls"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

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
	return Dial(t, nil, srv.ClientURL())
}

// DialTimeout is how long a test's etcd client waits for a connection.
const DialTimeout = 5 * time.Second

// Dial returns a client of the members at endpoints, over TLS when
// tlsConfig is set; it closes when the test ends. It is the tests' one
// way to reach an etcd: a test that expects the connection to fail calls
// embeddedetcd.NewClient itself.
func Dial(t testing.TB, tlsConfig *tls.Config, endpoints ...string) *clientv3.Client {
	t.Helper()
	c, err := embeddedetcd.NewClient(endpoints, tlsConfig, DialTimeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}
