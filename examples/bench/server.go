package main

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/client-go/rest"

	"github.com/kcp-cache/kcp-cache/cache/options"
	inprocess "github.com/kcp-cache/kcp-cache/examples/internal/run"
)

// benchServer is a cache server with its embedded etcd, started in this
// process the way examples/cache-server starts one: production options
// (embedded etcd with fsync, watch cache on, etcd prefix /cache), except that
// every port is a free loopback port and the root directory is temporary.
type benchServer struct {
	admin      *rest.Config // server root, admin token
	etcd       *clientv3.Client
	etcdPrefix string
	server     *inprocess.Server
}

func startServer(ctx context.Context, rootDir string) (*benchServer, error) {
	r, err := inprocess.Cache(ctx, rootDir, 0)
	if err != nil {
		r.Stop()
		return nil, err
	}
	s := &benchServer{admin: r.Config, etcdPrefix: options.DefaultEtcdPrefix, server: r}
	s.etcd, err = clientv3.New(clientv3.Config{Endpoints: []string{r.EtcdURL}, DialTimeout: 5 * time.Second, Context: ctx})
	if err != nil {
		s.stop()
		return nil, fmt.Errorf("etcd client: %w", err)
	}
	return s, nil
}

// stop shuts the server (and with it the embedded etcd) down; bounded.
func (s *benchServer) stop() {
	if s.etcd != nil {
		_ = s.etcd.Close()
	}
	s.server.Stop()
}
