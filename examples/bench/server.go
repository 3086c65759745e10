package main

import (
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/client-go/rest"

	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
	inprocess "github.com/kcp-cache/kcp-cache/examples/internal/run"
)

// benchServer is a cache server with its etcd, started in this process the
// way examples/cache-server starts one: production options (etcd with fsync,
// watch cache on, etcd prefix /cache), except that every port is a free
// loopback port and the root directory is temporary.
type benchServer struct {
	admin      *rest.Config     // server root, admin token
	etcd       *clientv3.Client // the baseline's client, the fixture's own
	etcdPrefix string
	server     *cachetest.Server
}

func startServer(ctx context.Context, rootDir string) (*benchServer, error) {
	srv, err := inprocess.Cache(ctx, rootDir, 0, nil)
	if err != nil {
		return nil, err
	}
	return &benchServer{admin: srv.Config(), etcd: srv.EtcdClient(), etcdPrefix: srv.EtcdPrefix(), server: srv}, nil
}

// stop shuts the server and its etcd down; bounded.
func (s *benchServer) stop() error { return s.server.Stop() }
