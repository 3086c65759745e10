// Package run starts cache servers and shards in-process on loopback, waits
// until they are ready and stops them: shared by the demo and the shard
// tests.
package run

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	genericoptions "k8s.io/apiserver/pkg/server/options"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/kcp-cache/kcp-cache/cache/options"
	"github.com/kcp-cache/kcp-cache/cache/server"
	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
	"github.com/kcp-cache/kcp-cache/examples/shard/shardserver"
)

// Server is a server started in-process.
type Server struct {
	// Config reaches the server's root as its admin.
	Config *rest.Config
	// Kubeconfig is the admin kubeconfig the server wrote, if any.
	Kubeconfig string
	// EtcdURL is the embedded etcd's client URL, for a cache server.
	EtcdURL string
	// Shard is set for shards.
	Shard *shardserver.Shard

	cancel context.CancelFunc
	done   chan error
}

// Stop shuts the server down and waits for it; it is safe to call twice.
func (r *Server) Stop() {
	if r == nil || r.cancel == nil {
		return
	}
	r.cancel()
	r.cancel = nil
	select {
	case <-r.done:
	case <-time.After(30 * time.Second):
	}
}

// loopbackListener listens on loopback only: nothing started here opens a
// port to the network.
func loopbackListener(port int) (net.Listener, int, error) {
	return genericoptions.CreateListener("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), net.ListenConfig{})
}

// Cache starts a standalone cache server with an embedded etcd under root,
// on loopback port port (0: any free port), and waits until it is ready.
// Starting it again with the same root and port reuses its data, serving
// certificate and admin token, so kubeconfigs stay valid.
func Cache(ctx context.Context, root string, port int) (*Server, error) {
	opts := options.NewOptions()
	opts.RootDirectory = root
	opts.EmbeddedEtcd.ClientPort, opts.EmbeddedEtcd.PeerPort = 0, 0
	l, port, err := loopbackListener(port)
	if err != nil {
		return nil, err
	}
	opts.SecureServing.Listener, opts.SecureServing.BindPort = l, port
	completed, err := opts.Complete()
	if err != nil {
		return nil, err
	}
	if errs := completed.Validate(); len(errs) > 0 {
		return nil, fmt.Errorf("cache options: %v", errs)
	}
	cfg, err := server.NewConfig(completed)
	if err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(klog.NewContext(context.WithoutCancel(ctx), klog.Background().WithName("cache-server")))
	srv, err := cfg.Complete().New(runCtx)
	if err != nil {
		cancel()
		return nil, err
	}
	r := &Server{Config: srv.AdminConfig(), Kubeconfig: srv.KubeconfigPath(), EtcdURL: srv.EmbeddedEtcdURL(), cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- srv.PrepareRun().Run(runCtx) }()
	return r, WaitOK(ctx, r.Config, "/readyz")
}

// Shard starts a shard named name under root with an embedded etcd on a free
// loopback port and waits until it is ready; customize may adjust its
// options (where the cache is, --run-cache-server, ...).
func Shard(ctx context.Context, root, name string, customize func(*shardserver.Options)) (*Server, error) {
	opts := shardserver.NewOptions()
	opts.Server.RootDirectory = root
	opts.Cache.ShardName = name
	if customize != nil {
		customize(opts)
	}
	l, port, err := loopbackListener(0)
	if err != nil {
		return nil, err
	}
	opts.Server.SecureServing.Listener, opts.Server.SecureServing.BindPort = l, port
	completed, err := opts.Complete()
	if err != nil {
		return nil, err
	}
	if err := completed.Validate(); err != nil {
		return nil, fmt.Errorf("shard options: %w", err)
	}
	runCtx, cancel := context.WithCancel(klog.NewContext(context.WithoutCancel(ctx), klog.Background().WithName("shard").WithValues("shard", name)))
	s, err := shardserver.New(runCtx, completed)
	if err != nil {
		cancel()
		return nil, err
	}
	r := &Server{Config: s.AdminConfig(), Kubeconfig: s.CacheKubeconfig(), Shard: s, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- s.Run(runCtx) }()
	return r, WaitOK(ctx, r.Config, "/readyz")
}

// Get fetches path with cfg's credentials and returns the status code.
func Get(ctx context.Context, cfg *rest.Config, path string) (int, error) {
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return 0, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, cfg.Host+path, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+cfg.BearerToken)
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// WaitOK polls path until it answers 200, for up to a minute.
func WaitOK(ctx context.Context, cfg *rest.Config, path string) error {
	return cachetest.WaitForPath(ctx, cfg, path)
}
