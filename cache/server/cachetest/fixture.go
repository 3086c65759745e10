package cachetest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"

	clientv3 "go.etcd.io/etcd/client/v3"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/options"
	"github.com/kcp-cache/kcp-cache/cache/server"
	"github.com/kcp-cache/kcp-cache/cache/server/embeddedetcd"
	"github.com/kcp-cache/kcp-cache/cache/server/pki"
	"github.com/kcp-cache/kcp-cache/cache/server/ports"
	"github.com/kcp-cache/kcp-cache/cache/server/standin"
)

// DefaultHostShard is the shard a mounted cache's host holds.
const DefaultHostShard = "amber"

// hostEtcdPrefix is where a mounted cache's host keeps its own objects, next
// to the cache's prefix in the same etcd.
const hostEtcdPrefix = "/shard"

// Options says what Start starts. The zero value is a standalone cache server
// on a reserved loopback port, with an etcd of its own that does not fsync,
// both in temporary directories.
type Options struct {
	// RootDirectory holds the serving certificate, admin token and
	// kubeconfig. Empty: a temporary directory that Stop removes. A
	// server started again on the same directory and Port keeps its
	// kubeconfig valid.
	RootDirectory string
	// EtcdDirectory holds etcd's data. Empty: a temporary directory that
	// Stop removes.
	EtcdDirectory string
	// Port is the server's loopback port. Zero: a reserved free port.
	Port int
	// ClientCAFile, when set, is the CA the server trusts for client
	// certificates (--client-ca-file), held by whoever issues the
	// identities (the parent of a member process); empty: Start creates
	// one, and UserConfig issues its identities.
	ClientCAFile string
	// Durable makes etcd fsync, as production does: for measurements.
	// Tests leave it off; fsync dominates their latency.
	Durable bool

	// Mounted serves the cache under /services/cache/ of a host server
	// instead of on a port of its own, as a kcp shard with
	// --run-cache-server does. The host is a stand-in for the shard: it
	// holds HostShard's own objects under /clusters/{cluster}/, in the
	// same etcd under another prefix.
	Mounted bool
	// HostShard names the host's shard. Empty: DefaultHostShard.
	HostShard string
	// WireHost, when set with Mounted, is called at every start once the
	// host and the mounted cache are built, before they run, to wire the
	// host's own users of the cache into it as kcp wires its replication
	// (hook.Install). The functions it returns run at shutdown before the
	// cache stops (RunMounted's stopFirst).
	WireHost func(host, mounted *server.Server) ([]func(), error)

	// Configure, when set, changes the cache server's configuration before
	// it is completed, at every start (its bootstrapped types, say).
	Configure func(*server.Config)
	// Flags, when set, changes the cache server's options (its flags)
	// before every start: a token file, auditing, a client CA of its own.
	Flags func(*options.Options)
	// Starting, when set, is called at every start with the cache's admin
	// config once the server is built, just before it runs: for tests of
	// what a starting server answers. It must not block.
	Starting func(*rest.Config)
}

// Server is an etcd and a cache server (and, when mounted, its host) running
// in this process on loopback.
type Server struct {
	opts       Options
	tempDirs   []string
	etcd       *embeddedetcd.Server
	etcdTLS    embeddedetcd.TLSFiles
	etcdClient *clientv3.Client
	etcdPrefix string
	// clientCA issues the identities of UserConfig; the server trusts it.
	clientCA     *pki.CA
	clientCAFile string

	process    *Process
	server     *server.Server
	config     *rest.Config
	hostConfig *rest.Config
	kubeconfig string
}

// Start starts etcd and the server and waits until the server is ready. ctx
// bounds only the start and carries the logger; the servers run until Stop.
// On error nothing keeps running.
func Start(ctx context.Context, opts Options) (_ *Server, err error) {
	s := &Server{opts: opts, etcdPrefix: options.DefaultEtcdPrefix}
	defer func() {
		if err != nil {
			err = errors.Join(err, s.Stop())
		}
	}()
	if s.opts.HostShard == "" {
		s.opts.HostShard = DefaultHostShard
	}
	if s.opts.RootDirectory, err = s.dirOrTemp(s.opts.RootDirectory); err != nil {
		return nil, err
	}
	if s.opts.EtcdDirectory, err = s.dirOrTemp(s.opts.EtcdDirectory); err != nil {
		return nil, err
	}
	if s.opts.Port == 0 {
		if s.opts.Port, err = ports.Reserve(); err != nil {
			return nil, err
		}
	}
	// etcd accepts only the server's client certificate, handed over with
	// the external etcd flags (--etcd-cafile, ...), as in production.
	certs, err := s.dirOrTemp("")
	if err != nil {
		return nil, err
	}
	if s.etcdTLS, err = embeddedetcd.GenerateTLS(filepath.Join(certs, "etcd")); err != nil {
		return nil, err
	}
	if s.opts.ClientCAFile != "" {
		s.clientCAFile = s.opts.ClientCAFile
	} else if err := s.newClientCA(filepath.Join(certs, "client-ca.crt")); err != nil {
		return nil, err
	}
	if err := s.startEtcd(ctx); err != nil {
		return nil, err
	}
	if err := s.startServer(ctx, "/readyz"); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *Server) dirOrTemp(dir string) (string, error) {
	if dir != "" {
		return dir, nil
	}
	dir, err := os.MkdirTemp("", "kcp-cache-test-")
	if err != nil {
		return "", err
	}
	s.tempDirs = append(s.tempDirs, dir)
	return dir, nil
}

// startServer builds and runs the server on the running etcd and waits
// until readyPath answers 200.
func (s *Server) startServer(ctx context.Context, readyPath string) error {
	logger := klog.FromContext(ctx).WithName("cache-server")
	ctx = klog.NewContext(ctx, logger)
	var run func(context.Context) error
	var err error
	if s.opts.Mounted {
		run, err = s.newMounted(ctx)
	} else {
		run, err = s.newStandalone(ctx)
	}
	if err != nil {
		return err
	}
	ready := s.config
	if s.hostConfig != nil {
		ready = s.hostConfig
	}
	if s.opts.Starting != nil {
		s.opts.Starting(rest.CopyConfig(s.config))
	}
	p, err := startProcess(ctx, ready, readyPath, run)
	if err != nil {
		// s.process stays the stopped one: a later Halt, Restart or Done
		// of a server that failed to start must not dereference nil.
		return err
	}
	s.process = p
	return nil
}

func (s *Server) serverOptions(root, etcdPrefix string) *options.Options {
	opts := options.NewOptions()
	opts.RootDirectory = root
	transport := &opts.Etcd.StorageConfig.Transport
	transport.ServerList = []string{s.etcd.ClientURL()}
	transport.TrustedCAFile, transport.CertFile, transport.KeyFile = s.etcdTLS.CAFile, s.etcdTLS.ClientCertFile, s.etcdTLS.ClientKeyFile
	opts.Etcd.StorageConfig.Prefix = etcdPrefix
	opts.Authentication.ClientCert.ClientCA = s.clientCAFile
	return opts
}

// listen opens the server's loopback listener on the reserved port.
func (s *Server) listen(opts *options.Options) error {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(s.opts.Port))
	listener, port, err := genericoptions.CreateListener("tcp", addr, net.ListenConfig{})
	if err != nil {
		return fmt.Errorf("listening on %s: %w", addr, err)
	}
	opts.SecureServing.Listener, opts.SecureServing.BindPort = listener, port
	opts.SecureServing.BindAddress = net.ParseIP("127.0.0.1")
	return nil
}

func newConfig(opts *options.Options, build func(options.CompletedOptions) (*server.Config, error)) (*server.Config, error) {
	completed, err := opts.Complete()
	if err != nil {
		return nil, err
	}
	if errs := completed.Validate(); len(errs) > 0 {
		return nil, fmt.Errorf("invalid options: %v", errs)
	}
	return build(completed)
}

func (s *Server) newStandalone(ctx context.Context) (func(context.Context) error, error) {
	opts := s.serverOptions(s.opts.RootDirectory, s.etcdPrefix)
	if err := s.listen(opts); err != nil {
		return nil, err
	}
	if s.opts.Flags != nil {
		s.opts.Flags(opts)
	}
	cfg, err := newConfig(opts, server.NewConfig)
	if err != nil {
		return nil, err
	}
	if s.opts.Configure != nil {
		s.opts.Configure(cfg)
	}
	srv, err := cfg.Complete().New(ctx)
	if err != nil {
		return nil, err
	}
	s.server, s.config, s.kubeconfig = srv, srv.AdminConfig(), srv.KubeconfigPath()
	return func(ctx context.Context) error {
		defer srv.Close()
		return srv.PrepareRun().Run(ctx)
	}, nil
}

// newMounted builds a host that holds its shard's own objects and the cache
// mounted under its /services/cache/, as examples/shard does.
func (s *Server) newMounted(ctx context.Context) (func(context.Context) error, error) {
	hostOpts := s.serverOptions(s.opts.RootDirectory+"/host", hostEtcdPrefix)
	if err := s.listen(hostOpts); err != nil {
		return nil, err
	}
	hostCfg, err := newConfig(hostOpts, server.NewConfig)
	if err != nil {
		return nil, err
	}
	mount := &server.Mount{}
	generic := hostCfg.Apiextensions.GenericConfig
	cacheOpts := s.serverOptions(s.opts.RootDirectory, s.etcdPrefix)
	if s.opts.Flags != nil {
		s.opts.Flags(cacheOpts)
	}
	cacheCfg, err := newConfig(cacheOpts, func(o options.CompletedOptions) (*server.Config, error) {
		return server.NewMountedConfig(o, server.Host{
			LoopbackClientConfig: generic.LoopbackClientConfig,
			Authenticator:        generic.Authentication.Authenticator,
			Authorizer:           generic.Authorization.Authorizer,
			Shard:                s.opts.HostShard,
		})
	})
	if err != nil {
		return nil, err
	}
	if s.opts.Configure != nil {
		s.opts.Configure(cacheCfg)
	}
	host, err := hostCfg.Complete().New(ctx)
	if err != nil {
		return nil, err
	}
	standin.Serve(host, s.opts.HostShard, mount)
	mounted, err := cacheCfg.Complete().New(ctx)
	if err != nil {
		host.Close()
		return nil, err
	}
	mount.Serve(mounted)
	var stopFirst []func()
	if s.opts.WireHost != nil {
		if stopFirst, err = s.opts.WireHost(host, mounted); err != nil {
			mounted.Close()
			host.Close()
			return nil, err
		}
	}
	s.server = mounted
	s.config, s.hostConfig, s.kubeconfig = mounted.AdminConfig(), host.AdminConfig(), host.KubeconfigPath()
	return func(ctx context.Context) error {
		defer host.Close()
		defer mounted.Close()
		return server.RunMounted(ctx, host, mounted, stopFirst...)
	}, nil
}

// Stop stops the server, then etcd, and removes the temporary directories.
// It returns the server's Run error; it is safe to call more than once.
func (s *Server) Stop() error {
	var errs []error
	if s.process != nil {
		errs = append(errs, s.process.Stop())
	}
	errs = append(errs, s.stopEtcd())
	for _, dir := range s.tempDirs {
		errs = append(errs, os.RemoveAll(dir))
	}
	s.tempDirs = nil
	return errors.Join(errs...)
}

// Restart stops the server and starts a new one on the same etcd, root
// directory and address; configs returned earlier stay valid. opts change
// the options first (a new Configure, say). It returns the stopped server's
// Run error, or the start's.
func (s *Server) Restart(ctx context.Context, opts ...Option) error {
	return s.restart(ctx, "/readyz", opts)
}

// RestartUnready is Restart for a server that must not become ready: it
// waits for /healthz instead of /readyz.
func (s *Server) RestartUnready(ctx context.Context, opts ...Option) error {
	return s.restart(ctx, "/healthz", opts)
}

func (s *Server) restart(ctx context.Context, readyPath string, opts []Option) error {
	for _, opt := range opts {
		opt(&s.opts)
	}
	if err := s.Halt(); err != nil {
		return err
	}
	return s.startServer(ctx, readyPath)
}

// Halt stops the server and keeps what Restart keeps (etcd, directories,
// address) until Resume starts it again: for tests of what happens while
// it is down. It returns the stopped server's Run error.
func (s *Server) Halt() error {
	if err := s.process.Stop(); err != nil {
		return fmt.Errorf("stopping: %w", err)
	}
	return nil
}

// Resume starts a server that Halt stopped, with its options, and waits
// until it is ready.
func (s *Server) Resume(ctx context.Context) error {
	return s.startServer(ctx, "/readyz")
}

// Done is closed when the server's Run has returned, whether Stop or Halt
// ended it or it ended on its own; Halt then returns its error.
func (s *Server) Done() <-chan struct{} { return s.process.Done() }

// Server is the running cache server (the mounted one, when mounted), for
// what only the server knows, such as the types it serves.
func (s *Server) Server() *server.Server { return s.server }

// Config returns an admin client configuration for the cache's root: the
// server's own root, or the host's when mounted. Append
// kcpcache.ScopedPathPrefix, or use ScopedConfig.
func (s *Server) Config() *rest.Config { return rest.CopyConfig(s.config) }

// ScopedConfig returns an admin configuration whose host includes the scope
// prefix, so ordinary clients address one partition (or a wildcard).
func (s *Server) ScopedConfig(shard, cluster string) *rest.Config {
	c := s.Config()
	c.Host = kcpcache.JoinHostPath(c.Host, kcpcache.ScopedPathPrefix(kcpcache.Scope{Shard: shard, Cluster: cluster}))
	return c
}

// HostConfig returns the host's admin configuration when the cache is
// mounted (append /clusters/{cluster} for the host shard's own objects), nil
// otherwise.
func (s *Server) HostConfig() *rest.Config {
	if s.hostConfig == nil {
		return nil
	}
	return rest.CopyConfig(s.hostConfig)
}

// Kubeconfig is the admin kubeconfig the server wrote (the host's, when
// mounted: the mounted cache accepts the host's credentials).
func (s *Server) Kubeconfig() string { return s.kubeconfig }

// EtcdClient reads etcd directly, for asserting what was (not) stored.
func (s *Server) EtcdClient() *clientv3.Client { return s.etcdClient }

// EtcdPrefix is the prefix all cache keys live under.
func (s *Server) EtcdPrefix() string { return s.etcdPrefix }

// Options returns the options the server runs with, defaults filled in:
// start another Server with them to come back on the same address and data
// after Stop (directories Start created itself are gone by then).
func (s *Server) Options() Options { return s.opts }
