// Package run starts the examples' servers in-process on loopback with the
// test fixture (cache/server/cachetest), so that the demo, the bench and the
// shard tests start servers exactly as every other test does.
package run

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strconv"

	genericoptions "k8s.io/apiserver/pkg/server/options"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/options"
	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
	"github.com/kcp-cache/kcp-cache/cache/server/ports"
	"github.com/kcp-cache/kcp-cache/examples/shard/shardserver"
)

// Cache starts a standalone cache server with an etcd that fsyncs, as
// examples/cache-server runs, its certificate, token, kubeconfig and etcd
// data under root, on loopback port port (0: a reserved free port). Starting
// it again with the same root and port reuses its data, serving certificate
// and admin token, so kubeconfigs stay valid. flags, when set, adjusts its
// options (a client CA, auditing, ...).
func Cache(ctx context.Context, root string, port int, flags func(*options.Options)) (*cachetest.Server, error) {
	return cachetest.Start(ctx, cachetest.Options{
		RootDirectory: root,
		EtcdDirectory: filepath.Join(root, "etcd-server"),
		Port:          port,
		Durable:       true,
		Flags:         flags,
	})
}

// Shard is a shard stand-in running in-process.
type Shard struct {
	*cachetest.Process
	*shardserver.Shard
	// Config reaches the shard's root as its admin.
	Config *rest.Config
}

// StartShard starts a shard named name under root with an embedded etcd on
// reserved loopback ports and waits until it is ready; customize may adjust
// its options (where the cache is, --run-cache-server, ...). Stop stops it
// and returns its Run error.
func StartShard(ctx context.Context, root, name string, customize func(*shardserver.Options)) (*Shard, error) {
	opts := shardserver.NewOptions()
	opts.Server.RootDirectory = root
	opts.Cache.ShardName = name
	if customize != nil {
		customize(opts)
	}
	port, err := ports.Reserve()
	if err != nil {
		return nil, err
	}
	l, port, err := genericoptions.CreateListener("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), net.ListenConfig{})
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
	ctx = klog.NewContext(ctx, klog.FromContext(ctx).WithName("shard").WithValues("shard", name))
	s, err := shardserver.New(ctx, completed)
	if err != nil {
		return nil, err
	}
	p, err := cachetest.StartProcess(ctx, s.AdminConfig(), func(ctx context.Context) error {
		defer s.Close()
		return s.Run(ctx)
	})
	if err != nil {
		return nil, err
	}
	return &Shard{Process: p, Shard: s, Config: s.AdminConfig()}, nil
}

// Get fetches path with cfg's credentials and returns the status code.
func Get(ctx context.Context, cfg *rest.Config, path string) (int, error) {
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return 0, err
	}
	defer client.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, kcpcache.JoinHostPath(cfg.Host, path), nil)
	if err != nil {
		return 0, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}
