package server

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"

	apiextensionsapiserver "k8s.io/apiextensions-apiserver/pkg/apiserver"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/klog/v2"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

// Mount serves a cache under /services/cache/ of a host server. Wrap the
// host's handler chain with it when building the host's configuration (the
// cache server usually does not exist yet), then call Serve once it does.
// It routes before the host's own filters, so the cache authenticates,
// authorizes, audits and limits its requests itself.
type Mount struct {
	handler atomic.Pointer[http.Handler]
}

// WrapHandlerChain returns a BuildHandlerChainFunc that routes the cache's
// prefix to the mounted cache and everything else to build's chain.
func (m *Mount) WrapHandlerChain(build func(http.Handler, *genericapiserver.Config) http.Handler) func(http.Handler, *genericapiserver.Config) http.Handler {
	return func(apiHandler http.Handler, c *genericapiserver.Config) http.Handler {
		return m.Route(build(apiHandler, c))
	}
}

// Route sends requests below the cache's prefix to the mounted cache and
// everything else to host.
func (m *Mount) Route(host http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if p := req.URL.Path; p != kcpcache.ServicePrefix && !strings.HasPrefix(p, kcpcache.ServicePrefix+"/") {
			host.ServeHTTP(w, req)
			return
		}
		h := m.handler.Load()
		if h == nil {
			err := apierrors.NewServiceUnavailable("the cache server is not started yet")
			responsewriters.ErrorNegotiated(err, apiextensionsapiserver.Codecs, schema.GroupVersion{}, w, req)
			return
		}
		(*h).ServeHTTP(w, req)
	})
}

// Serve starts routing the prefix to s.
func (m *Mount) Serve(s *Server) {
	var h http.Handler = s.GenericAPIServer.Handler
	m.handler.Store(&h)
}

// MountedHookName names the host's post-start hook that starts a mounted
// cache and its pre-shutdown hook that stops it (see RunIn).
const MountedHookName = "kcp-cache-mounted-server"

// RunMounted runs host and the cache mounted in it (see RunIn) until ctx is
// done: stopFirst, then the cache, then the host, whose etcd the cache may
// share. A cache that fails stops the host. It returns both Run errors.
func RunMounted(ctx context.Context, host, mounted *Server, stopFirst ...func()) error {
	hostCtx, stopHost := context.WithCancel(ctx)
	defer stopHost()
	closeCache, err := mounted.runIn(host.GenericAPIServer, stopFirst, stopHost)
	if err != nil {
		mounted.Close()
		return err
	}
	hostErr := host.PrepareRun().Run(hostCtx)
	cacheErr := closeCache()
	if errors.Is(cacheErr, ErrClosed) {
		// Closed by the host's shutdown before it began to run.
		cacheErr = nil
	}
	return errors.Join(hostErr, cacheErr)
}

// RunIn runs a mounted cache as part of host, as kcp runs its in-process
// cache: the cache starts with host's post-start hooks and stops from host's
// pre-shutdown hooks, in this order: stopFirst (the host's users of the
// cache, such as the replication hook's Stop) return, then the cache drains
// and stops its loops and, last, its embedded etcd. The host still serves
// meanwhile, so every request the cache answers through the host's listener
// is answered. A cache that fails while the host runs is logged; the host
// keeps serving without it. When host does not run (or fails before its
// post-start hooks), its owner calls Close.
func (s *Server) RunIn(host *genericapiserver.GenericAPIServer, stopFirst ...func()) error {
	_, err := s.runIn(host, stopFirst, nil)
	return err
}

// runIn does RunIn's work; ended, when set, is called once the cache's Run
// has returned. The function it returns closes the cache and gives its Run
// error, nil when it never ran.
func (s *Server) runIn(host *genericapiserver.GenericAPIServer, stopFirst []func(), ended func()) (func() error, error) {
	prepared := s.PrepareRun()
	var (
		mu     sync.Mutex
		done   chan struct{}
		runErr error
	)
	if err := host.AddPostStartHook(MountedHookName, func(hookCtx genericapiserver.PostStartHookContext) error {
		d := make(chan struct{})
		mu.Lock()
		done = d
		mu.Unlock()
		logger := klog.FromContext(hookCtx)
		go func() {
			defer close(d)
			// Not the hook's context: the host ends it only after its
			// pre-shutdown hooks, which stop the cache themselves.
			err := prepared.Run(context.WithoutCancel(hookCtx))
			if err != nil && !errors.Is(err, ErrClosed) {
				logger.Error(err, "The mounted cache server stopped")
			}
			mu.Lock()
			runErr = err
			mu.Unlock()
			if ended != nil {
				ended()
			}
		}()
		return nil
	}); err != nil {
		return nil, err
	}
	if err := host.AddPreShutdownHook(MountedHookName, func() error {
		for _, stop := range stopFirst {
			stop()
		}
		s.Close()
		return nil
	}); err != nil {
		return nil, err
	}
	return func() error {
		s.Close()
		mu.Lock()
		d := done
		mu.Unlock()
		if d == nil {
			return nil
		}
		<-d
		mu.Lock()
		defer mu.Unlock()
		return runErr
	}, nil
}
