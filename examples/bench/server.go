package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/kcp-cache/kcp-cache/cache/options"
	"github.com/kcp-cache/kcp-cache/cache/server"
)

// benchServer is a cache server with its embedded etcd, started in this
// process the way examples/cache-server starts one: production options
// (embedded etcd with fsync, watch cache on, etcd prefix /cache), except that
// every port is a free loopback port and the root directory is temporary.
type benchServer struct {
	admin      *rest.Config // server root, admin token
	etcd       *clientv3.Client
	etcdURL    string
	etcdPrefix string

	cancel context.CancelFunc
	done   chan error
}

const serverReadyTimeout = 2 * time.Minute

func startServer(ctx context.Context, rootDir string) (*benchServer, error) {
	opts := options.NewOptions()
	opts.RootDirectory = rootDir
	opts.EmbeddedEtcd.ClientPort = 0
	opts.EmbeddedEtcd.PeerPort = 0
	listener, port, err := genericoptions.CreateListener("tcp", "127.0.0.1:0", net.ListenConfig{})
	if err != nil {
		return nil, fmt.Errorf("listening: %w", err)
	}
	opts.SecureServing.Listener = listener
	opts.SecureServing.BindPort = port
	opts.SecureServing.BindAddress = net.ParseIP("127.0.0.1")

	completed, err := opts.Complete()
	if err != nil {
		return nil, err
	}
	if errs := completed.Validate(); len(errs) > 0 {
		return nil, fmt.Errorf("invalid options: %w", utilerrors.NewAggregate(errs))
	}
	cfg, err := server.NewConfig(completed)
	if err != nil {
		return nil, fmt.Errorf("server config: %w", err)
	}
	if cfg.Extra.EmbeddedEtcd == nil {
		return nil, fmt.Errorf("expected an embedded etcd")
	}
	etcdURL := cfg.Extra.EmbeddedEtcd.ClientURL()

	runCtx, cancel := context.WithCancel(klog.NewContext(ctx, klog.Background().WithName("cache-server")))
	srv, err := cfg.Complete().New(runCtx) // starts the embedded etcd
	if err != nil {
		cancel()
		return nil, fmt.Errorf("building server: %w", err)
	}
	s := &benchServer{
		admin:      srv.AdminConfig(),
		etcdURL:    etcdURL,
		etcdPrefix: completed.Etcd.StorageConfig.Prefix,
		cancel:     cancel,
		done:       make(chan error, 1),
	}
	go func() { s.done <- srv.PrepareRun().Run(runCtx) }()
	if err := s.waitReady(ctx); err != nil {
		s.stop()
		return nil, err
	}
	s.etcd, err = clientv3.New(clientv3.Config{Endpoints: []string{etcdURL}, DialTimeout: 5 * time.Second, Context: ctx})
	if err != nil {
		s.stop()
		return nil, fmt.Errorf("etcd client: %w", err)
	}
	return s, nil
}

func (s *benchServer) waitReady(ctx context.Context) error {
	client, err := rest.HTTPClientFor(s.admin)
	if err != nil {
		return err
	}
	defer client.CloseIdleConnections()
	var last string
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, serverReadyTimeout, true, func(ctx context.Context) (bool, error) {
		select {
		case err := <-s.done:
			return false, fmt.Errorf("server stopped while starting: %v", err)
		default:
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.admin.Host+"/readyz", nil)
		if err != nil {
			return false, err
		}
		resp, err := client.Do(req)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		_ = resp.Body.Close()
		last = resp.Status
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		return fmt.Errorf("cache server not ready (last: %s): %w", last, err)
	}
	return nil
}

// stop shuts the server (and with it the embedded etcd) down; bounded.
func (s *benchServer) stop() {
	if s.etcd != nil {
		_ = s.etcd.Close()
	}
	if s.cancel == nil {
		return
	}
	s.cancel()
	s.cancel = nil
	select {
	case <-s.done:
	case <-time.After(30 * time.Second):
		klog.Background().Info("cache server did not stop within 30s")
	}
}
