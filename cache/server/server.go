package server

import (
	"context"
	"errors"
	"fmt"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"
	apiextensionsapiserver "k8s.io/apiextensions-apiserver/pkg/apiserver"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/kcp-cache/kcp-cache/cache/server/bootstrap"
	"github.com/kcp-cache/kcp-cache/cache/server/dataplane"
	"github.com/kcp-cache/kcp-cache/cache/server/discovery"
	"github.com/kcp-cache/kcp-cache/cache/server/embeddedetcd"
	"github.com/kcp-cache/kcp-cache/cache/server/epoch"
	"github.com/kcp-cache/kcp-cache/cache/server/profiler"
	"github.com/kcp-cache/kcp-cache/cache/server/shardmetrics"
)

// Server is a cache server that New built.
//
// Its lifecycle, in order: New starts the embedded etcd (if configured) and
// builds the API server on it; PrepareRun().Run serves until its context
// ends, then stops the API server and after it the etcd, so that the API
// server never retries against a member that is going away; Close stops
// whatever is still running. Close is safe at any time and more than once:
// after New alone (a host that fails before Run), during Run (it ends Run
// and waits for it) and after Run. A host defers Close as soon as New
// succeeds.
type Server struct {
	// GenericAPIServer is the upstream server; hosts may add hooks and checks.
	GenericAPIServer *genericapiserver.GenericAPIServer

	apiextensions *apiextensionsapiserver.CustomResourceDefinitions
	etcd          *embeddedetcd.Server
	etcdTLS       *embeddedetcd.TLSFiles
	// etcdClient reaches the cache's etcd directly, for data removal and
	// for reading every identity of a published resource at once.
	etcdClient *clientv3.Client
	// background are the removal loops the post-start hooks started; stop
	// waits for them before it closes their etcd client and the etcd.
	background  sync.WaitGroup
	epoch       *epoch.Keeper
	plane       *dataplane.Registry
	adminConfig *rest.Config
	// hostShardConfig reaches a mounted cache as the host's shard.
	hostShardConfig *rest.Config
	kubeconfigPath  string
	// profiler serves Go's profiler from New until stop; nil without one.
	profiler *profiler.Server

	mu sync.Mutex
	// closed is set by Close; Run refuses to start after it.
	closed bool
	// cancelRun ends a Run in progress; runDone is closed when it returned.
	cancelRun context.CancelFunc
	runDone   chan struct{}
	stopOnce  sync.Once
}

// ErrClosed is returned by Run on a server that was closed or already ran.
var ErrClosed = errors.New("cache server is closed")

// New starts the embedded etcd (if configured), builds the API server and
// writes the admin kubeconfig. On error, everything it started is stopped;
// on success the caller owns the server and must Run or Close it.
func (c CompletedConfig) New(ctx context.Context) (_ *Server, err error) {
	logger := klog.FromContext(ctx)
	s := &Server{kubeconfigPath: c.derived.kubeconfigPath}
	defer func() {
		if err != nil {
			s.stop()
		}
	}()
	// First, so that the start itself can be profiled.
	if addr := c.derived.profilerAddress; addr != "" {
		if s.profiler, err = profiler.Start(ctx, addr); err != nil {
			return nil, err
		}
	}
	if c.derived.embeddedEtcd != nil {
		if s.etcd, err = embeddedetcd.Start(ctx, *c.derived.embeddedEtcd); err != nil {
			return nil, err
		}
		s.etcdTLS = c.derived.embeddedEtcd.TLS
	}
	if s.epoch, err = epoch.NewKeeper(c.derived.etcdStorage, c.derived.epochFile); err != nil {
		return nil, err
	}
	if err := s.epoch.Resolve(ctx); err != nil {
		return nil, err
	}
	c.epoch = s.epoch

	c.Apiextensions.GenericConfig.BuildHandlerChainFunc = c.buildHandlerChain
	s.apiextensions, err = c.Apiextensions.New(genericapiserver.NewEmptyDelegate())
	if err != nil {
		return nil, err
	}
	s.GenericAPIServer = s.apiextensions.GenericAPIServer
	crdInformer := s.apiextensions.Informers.Apiextensions().V1().CustomResourceDefinitions()
	groups := discovery.NewGroupLister(crdInformer.Lister(), s.GenericAPIServer.DiscoveryGroupManager)
	if err := groups.Start(ctx, crdInformer.Informer()); err != nil {
		return nil, err
	}
	boot := bootstrap.NewInstaller(c.Extra.BootstrapCRDs)
	if s.etcdClient, err = newEtcdClient(c.derived.storage.Transport); err != nil {
		return nil, fmt.Errorf("etcd client: %w", err)
	}
	if err := s.servePlane(ctx, c.plane, crdInformer.Informer(), c.Extra.BootstrapCRDs, boot); err != nil {
		return nil, err
	}
	loopback := s.GenericAPIServer.LoopbackClientConfig
	if err := s.startCRDPurger(crdInformer, loopback); err != nil {
		return nil, err
	}
	if err := s.startRemoval(ctx, c, crdInformer, loopback); err != nil {
		return nil, err
	}
	if err := s.GenericAPIServer.AddPostStartHook(bootstrap.HookName, func(hookCtx genericapiserver.PostStartHookContext) error {
		return boot.Run(klog.NewContext(hookCtx, logger), loopback)
	}); err != nil {
		return nil, err
	}

	if err := s.GenericAPIServer.AddPostStartHook(epochHookName, func(hookCtx genericapiserver.PostStartHookContext) error {
		go s.epoch.Run(klog.NewContext(hookCtx, logger.WithName("epoch")))
		return nil
	}); err != nil {
		return nil, err
	}
	if err := s.startShardMetrics(loopback); err != nil {
		return nil, err
	}

	if c.derived.hostLoopback != nil {
		// Mounted: the host's listener, with the cache's admin token; the
		// host routes /services/cache/ to us before its own filters.
		s.adminConfig = rest.CopyConfig(c.derived.hostLoopback)
		s.adminConfig.BearerToken = c.derived.adminToken
		if c.derived.hostShardToken != "" {
			s.hostShardConfig = rest.CopyConfig(s.adminConfig)
			s.hostShardConfig.BearerToken = c.derived.hostShardToken
		}
	} else {
		listener := c.Apiextensions.GenericConfig.SecureServing.Listener
		s.adminConfig = adminRESTConfig(listenAddress(listener), c.derived.servingCAData, c.derived.adminToken)
	}
	if s.kubeconfigPath != "" {
		if err := WriteKubeconfig(s.kubeconfigPath, s.adminConfig); err != nil {
			return nil, fmt.Errorf("writing admin kubeconfig: %w", err)
		}
	}
	logger.Info("Cache server built", "address", s.adminConfig.Host, "kubeconfig", s.kubeconfigPath)
	return s, nil
}

// epochHookName records the cache's epoch while the server runs.
const epochHookName = "kcp-cache-epoch"

// Epoch is the cache's epoch, announced on every response as
// kcpcache.EpochHeader.
func (s *Server) Epoch() string { return s.epoch.Epoch() }

// AdminConfig returns a client configuration for the server root (no
// /services/cache prefix) authenticated as the admin user.
func (s *Server) AdminConfig() *rest.Config { return rest.CopyConfig(s.adminConfig) }

// KubeconfigPath is the admin kubeconfig New wrote; empty for a mounted cache.
func (s *Server) KubeconfigPath() string { return s.kubeconfigPath }

// EmbeddedEtcdURL is the client URL of the embedded etcd; empty without one.
func (s *Server) EmbeddedEtcdURL() string {
	if s.etcd == nil {
		return ""
	}
	return s.etcd.ClientURL()
}

// EmbeddedEtcdClusterID is the identity of the embedded etcd's cluster;
// empty without one. An in-memory etcd (--storage=memory) has a new one at
// every start: the cache starts empty, a new epoch.
func (s *Server) EmbeddedEtcdClusterID() string {
	if s.etcd == nil {
		return ""
	}
	return s.etcd.ClusterID()
}

// HostShardConfig returns a client configuration for a mounted cache that
// authenticates as the host's shard (Host.Shard), or nil without one.
func (s *Server) HostShardConfig() *rest.Config {
	if s.hostShardConfig == nil {
		return nil
	}
	return rest.CopyConfig(s.hostShardConfig)
}

// EmbeddedEtcdTLS holds the client certificate the embedded etcd demands
// (only this server has it); nil without an embedded etcd.
func (s *Server) EmbeddedEtcdTLS() *embeddedetcd.TLSFiles { return s.etcdTLS }

// PreparedServer is a server whose handlers are complete.
type PreparedServer struct {
	s   *Server
	run func(context.Context) error
}

// PrepareRun finishes the handler setup (OpenAPI, health endpoints).
func (s *Server) PrepareRun() PreparedServer {
	prepared := s.GenericAPIServer.PrepareRun()
	if s.GenericAPIServer.SecureServingInfo != nil {
		return PreparedServer{s: s, run: prepared.RunWithContext}
	}
	// Mounted: upstream's RunWithContext waits for its own listener to stop,
	// which a server without a listener never signals. Run the same phases
	// without it: post-start hooks, then shutdown hooks and storage teardown.
	return PreparedServer{s: s, run: func(ctx context.Context) error {
		if _, _, err := prepared.NonBlockingRunWithContext(ctx, 0); err != nil {
			return err
		}
		<-ctx.Done()
		err := s.GenericAPIServer.RunPreShutdownHooks()
		s.GenericAPIServer.Destroy()
		return err
	}}
}

// Run serves until ctx is done or Close is called, then shuts down
// gracefully: the API server drains and stops first, the embedded etcd
// after it. A server runs at most once; Run on a closed server returns
// ErrClosed at once.
func (p PreparedServer) Run(ctx context.Context) error {
	s := p.s
	s.mu.Lock()
	if s.closed || s.runDone != nil {
		s.mu.Unlock()
		return ErrClosed
	}
	ctx, cancel := context.WithCancel(ctx)
	s.cancelRun, s.runDone = cancel, make(chan struct{})
	s.mu.Unlock()

	defer close(s.runDone)
	defer s.stop()
	defer cancel()
	return p.run(ctx)
}

// Close stops the server: it ends a Run in progress and waits for it, or,
// when the server never ran, releases the storage and stops the embedded
// etcd that New started. It is safe to call more than once.
func (s *Server) Close() {
	s.mu.Lock()
	s.closed = true
	cancel, done := s.cancelRun, s.runDone
	s.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
	s.stop()
}

// stop releases storage, then stops etcd, once.
func (s *Server) stop() {
	s.stopOnce.Do(func() {
		if s.GenericAPIServer != nil {
			// Idempotent by contract (RegisterDestroyFunc); Run has
			// usually called it already.
			s.GenericAPIServer.Destroy()
		}
		// The hooks' context is done by now (Run ended), so the removal
		// loops are returning.
		s.background.Wait()
		if s.epoch != nil {
			// After the API server: its last writes count.
			s.epoch.Close(context.Background())
		}
		if s.etcdClient != nil {
			_ = s.etcdClient.Close()
		}
		if s.etcd != nil {
			s.etcd.Close()
		}
		if s.profiler != nil {
			s.profiler.Close()
		}
	})
}

// startShardMetrics keeps the per-shard gauges from a post-start hook.
func (s *Server) startShardMetrics(loopback *rest.Config) error {
	w, err := shardmetrics.NewWatcher(loopback, s.epoch.Epoch)
	if err != nil {
		return err
	}
	return s.GenericAPIServer.AddPostStartHook(shardmetrics.HookName, func(hookCtx genericapiserver.PostStartHookContext) error {
		go w.Run(hookCtx)
		return nil
	})
}
