package cachetest

import (
	"context"
	"fmt"
	"net"
	"sort"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/options"
	"github.com/kcp-cache/kcp-cache/cache/server"
	"github.com/kcp-cache/kcp-cache/cache/server/embeddedetcd"
)

// Server is a running cache server and its etcd.
type Server struct {
	etcd       *embeddedetcd.Server
	etcdClient *clientv3.Client
	rootDir    string
	port       int
	etcdPrefix string

	// configure changes the server's configuration at every start.
	configure []Option

	cancel context.CancelFunc
	done   chan error
	config *rest.Config
	server *server.Server
}

// Option changes a server's configuration before it is completed, such as
// its bootstrapped types.
type Option func(*server.Config)

// StartServer starts etcd and a cache server and waits until /readyz is OK.
func StartServer(t testing.TB, opts ...Option) *Server {
	t.Helper()
	ctx := klog.NewContext(context.Background(), klog.Background())
	etcd, err := embeddedetcd.Start(ctx, embeddedetcd.Config{Directory: t.TempDir(), UnsafeNoFsync: true})
	if err != nil {
		t.Fatalf("starting etcd: %v", err)
	}
	t.Cleanup(etcd.Close)
	client, err := clientv3.New(clientv3.Config{Endpoints: []string{etcd.ClientURL()}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	t.Cleanup(func() { _ = client.Close() })

	s := &Server{etcd: etcd, etcdClient: client, rootDir: t.TempDir(), etcdPrefix: options.DefaultEtcdPrefix, configure: opts}
	s.start(t)
	return s
}

func (s *Server) start(t testing.TB) {
	t.Helper()
	s.startNoWait(t)
	if err := s.waitReady(); err != nil {
		t.Fatal(err)
	}
}

// startNoWait starts the server and returns without waiting for /readyz.
func (s *Server) startNoWait(t testing.TB) {
	t.Helper()
	opts := options.NewOptions()
	opts.RootDirectory = s.rootDir
	opts.Etcd.StorageConfig.Transport.ServerList = []string{s.etcd.ClientURL()}
	opts.Etcd.StorageConfig.Prefix = s.etcdPrefix
	listener, port, err := genericoptions.CreateListener("tcp", net.JoinHostPort("127.0.0.1", fmt.Sprint(s.port)), net.ListenConfig{})
	if err != nil {
		t.Fatalf("listening: %v", err)
	}
	s.port = port
	opts.SecureServing.Listener = listener
	opts.SecureServing.BindPort = port
	opts.SecureServing.BindAddress = net.ParseIP("127.0.0.1")

	completed, err := opts.Complete()
	if err != nil {
		t.Fatal(err)
	}
	if errs := completed.Validate(); len(errs) > 0 {
		t.Fatalf("invalid options: %v", errs)
	}
	cfg, err := server.NewConfig(completed)
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	for _, configure := range s.configure {
		configure(cfg)
	}
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), klog.Background()))
	srv, err := cfg.Complete().New(ctx)
	if err != nil {
		cancel()
		t.Fatalf("new server: %v", err)
	}
	s.cancel = cancel
	s.done = make(chan error, 1)
	s.config = srv.AdminConfig()
	s.server = srv
	go func() { s.done <- srv.PrepareRun().Run(ctx) }()
	t.Cleanup(s.stop)
}

// waitReady waits for /readyz, or fails early if the server stops.
func (s *Server) waitReady() error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stopped := make(chan error, 1)
	go func() {
		select {
		case err := <-s.done:
			stopped <- fmt.Errorf("server stopped while starting: %v", err)
			cancel()
		case <-ctx.Done():
		}
	}()
	err := WaitForPath(ctx, s.config, "/readyz")
	select {
	case stopErr := <-stopped:
		return stopErr
	default:
		return err
	}
}

// stop shuts the server down and waits for it; safe to call twice.
func (s *Server) stop() {
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

// Restart stops the server and starts a new one on the same etcd, root
// directory and address; configs returned earlier stay valid. Options
// given here replace the ones the server was started with.
func (s *Server) Restart(t testing.TB, opts ...Option) {
	t.Helper()
	s.reconfigure(opts)
	s.start(t)
}

// RestartUnready is Restart without waiting for /readyz, for tests of a
// server that must not become ready; it waits for /healthz instead.
func (s *Server) RestartUnready(t testing.TB, opts ...Option) {
	t.Helper()
	s.reconfigure(opts)
	s.startNoWait(t)
	if err := WaitForPath(context.Background(), s.config, "/healthz"); err != nil {
		t.Fatal(err)
	}
}

// reconfigure stops the server and replaces its options, if any are given.
func (s *Server) reconfigure(opts []Option) {
	if len(opts) > 0 {
		s.configure = opts
	}
	s.stop()
}

// Server returns the running server.
func (s *Server) Server() *server.Server { return s.server }

// Config returns an admin client configuration for the server root.
func (s *Server) Config() *rest.Config { return rest.CopyConfig(s.config) }

// ScopedConfig returns an admin configuration whose host includes the scope
// prefix, so ordinary clients address one partition (or a wildcard).
func (s *Server) ScopedConfig(shard, clusterName string) *rest.Config {
	c := s.Config()
	c.Host += cache.ScopedPathPrefix(cache.Scope{Shard: shard, Cluster: clusterName})
	return c
}

// EtcdClient reads etcd directly, for asserting what was (not) stored.
func (s *Server) EtcdClient() *clientv3.Client { return s.etcdClient }

// EtcdPrefix is the prefix all cache keys live under.
func (s *Server) EtcdPrefix() string { return s.etcdPrefix }

// EtcdKeys returns the sorted etcd keys below the cache prefix + prefix.
func (s *Server) EtcdKeys(t testing.TB, prefix string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := s.etcdClient.Get(ctx, s.etcdPrefix+prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatalf("reading etcd: %v", err)
	}
	keys := make([]string, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		keys = append(keys, string(kv.Key))
	}
	sort.Strings(keys)
	return keys
}
