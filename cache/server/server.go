package server

import (
	"context"
	"fmt"

	apiextensionsapiserver "k8s.io/apiextensions-apiserver/pkg/apiserver"
	"k8s.io/apimachinery/pkg/util/sets"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/kcp-cache/kcp-cache/cache/server/dataplane"
	"github.com/kcp-cache/kcp-cache/cache/server/embeddedetcd"
)

// Server is a cache server that has been built but may not run yet.
type Server struct {
	// GenericAPIServer is the upstream server; hosts may add hooks and checks.
	GenericAPIServer *genericapiserver.GenericAPIServer

	apiextensions *apiextensionsapiserver.CustomResourceDefinitions
	etcd          *embeddedetcd.Server
	plane         *dataplane.Registry
	adminConfig   *rest.Config
}

// New starts the embedded etcd (if configured), builds the API server and
// writes the admin kubeconfig. On error, everything it started is stopped.
func (c CompletedConfig) New(ctx context.Context) (_ *Server, err error) {
	logger := klog.FromContext(ctx)
	s := &Server{}
	if c.Extra.EmbeddedEtcd != nil {
		if s.etcd, err = embeddedetcd.Start(ctx, *c.Extra.EmbeddedEtcd); err != nil {
			return nil, err
		}
		defer func() {
			if err != nil {
				s.etcd.Close()
			}
		}()
	}

	s.apiextensions, err = c.Apiextensions.New(genericapiserver.NewEmptyDelegate())
	if err != nil {
		return nil, err
	}
	s.GenericAPIServer = s.apiextensions.GenericAPIServer
	crdInformer := s.apiextensions.Informers.Apiextensions().V1().CustomResourceDefinitions()
	groups := &crdGroupLister{lister: crdInformer.Lister(), manager: s.GenericAPIServer.DiscoveryGroupManager, groups: sets.New[string]()}
	if err := groups.start(ctx, crdInformer.Informer()); err != nil {
		return nil, err
	}
	boot := &bootstrapper{crds: c.Extra.BootstrapCRDs}
	if err := s.servePlane(ctx, c.plane, crdInformer.Informer(), boot); err != nil {
		return nil, err
	}
	loopback := s.GenericAPIServer.LoopbackClientConfig
	if err := s.GenericAPIServer.AddPostStartHook(BootstrapHookName, func(hookCtx genericapiserver.PostStartHookContext) error {
		return boot.run(klog.NewContext(hookCtx, logger), loopback)
	}); err != nil {
		return nil, err
	}

	if c.Extra.HostLoopback != nil {
		// Mounted: the host's listener, with the cache's admin token; the
		// host routes /services/cache/ to us before its own filters.
		s.adminConfig = rest.CopyConfig(c.Extra.HostLoopback)
		s.adminConfig.BearerToken = c.Extra.AdminToken
	} else {
		listener := c.Apiextensions.GenericConfig.SecureServing.Listener
		s.adminConfig = adminRESTConfig(listenAddress(listener), c.Extra.ServingCAData, c.Extra.AdminToken)
	}
	if c.Extra.KubeconfigPath != "" {
		if err := WriteKubeconfig(c.Extra.KubeconfigPath, s.adminConfig); err != nil {
			return nil, fmt.Errorf("writing admin kubeconfig: %w", err)
		}
	}
	logger.Info("Cache server built", "address", s.adminConfig.Host, "kubeconfig", c.Extra.KubeconfigPath)
	return s, nil
}

// AdminConfig returns a client configuration for the server root (no
// /services/cache prefix) authenticated as the admin user.
func (s *Server) AdminConfig() *rest.Config { return rest.CopyConfig(s.adminConfig) }

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

// Run serves until ctx is done, then shuts down gracefully: the API server
// drains and stops first, the embedded etcd after it.
func (p PreparedServer) Run(ctx context.Context) error {
	if p.s.etcd != nil {
		defer p.s.etcd.Close()
	}
	return p.run(ctx)
}
