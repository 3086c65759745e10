package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"

	apiextensionsapiserver "k8s.io/apiextensions-apiserver/pkg/apiserver"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/client-go/rest"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/options"
	"github.com/kcp-cache/kcp-cache/cache/server/authentication"
)

// Host is what a server that mounts the cache lends it.
type Host struct {
	// LoopbackClientConfig reaches the host's own listener. The cache's
	// loopback client uses it with /services/cache appended and a token of
	// the cache's own.
	LoopbackClientConfig *rest.Config
	// Authenticator and Authorizer, when set, let the host's users use the
	// cache with the host's credentials and rules, next to the cache's own
	// admin and loopback tokens.
	Authenticator authenticator.Request
	Authorizer    authorizer.Authorizer
	// Shard, when set, is the host's own shard name: the cache mints a token
	// for its identity, system:kcp:shard:<Shard>, so that the host's
	// replication uses the cache as that shard (Server.HostShardConfig), not
	// as an admin.
	Shard string
}

// applyMountedServing configures a cache without a listener of its own.
func applyMountedServing(generic *genericapiserver.RecommendedConfig, derived *derivedConfig, auth *options.AuthenticationOptions, host Host) error {
	loopback := rest.CopyConfig(host.LoopbackClientConfig)
	u, err := url.Parse(loopback.Host)
	if err != nil {
		return fmt.Errorf("parsing the host's loopback address: %w", err)
	}
	token, err := authentication.RandomToken()
	if err != nil {
		return err
	}
	derived.hostLoopback = rest.CopyConfig(loopback)
	loopback.Host = kcpcache.JoinHostPath(loopback.Host, kcpcache.ServicePrefix)
	loopback.BearerToken = token
	loopback.BearerTokenFile = ""
	generic.LoopbackClientConfig = loopback
	generic.SecureServing = nil // until applyAuth has run: see below
	generic.ExternalAddress = u.Host
	if host.Shard != "" {
		if err := kcpcache.ValidateShardName(host.Shard); err != nil {
			return fmt.Errorf("the host's shard: %w", err)
		}
		if derived.hostShardToken, err = authentication.RandomToken(); err != nil {
			return err
		}
		derived.hostShard = host.Shard
	}
	if err := applyAuth(&generic.Config, auth, derived, &host); err != nil {
		return err
	}
	// After applyAuth: the host's TLS configuration asks for client
	// certificates, not this listener's.
	generic.SecureServing = &genericapiserver.SecureServingInfo{Listener: newIdleListener()}
	return nil
}

// idleListener is a mounted cache's listener: it accepts nothing, for the
// host's listener serves the cache. Upstream's Run keys the stages of its
// shutdown on its listener stopping (drain the requests in flight, flush
// the audit backend, close the etcd health checks' clients); with this one
// a mounted cache takes every stage as a standalone server does.
type idleListener struct {
	closed    chan struct{}
	closeOnce sync.Once
}

func newIdleListener() *idleListener { return &idleListener{closed: make(chan struct{})} }

// Accept waits for Close.
func (l *idleListener) Accept() (net.Conn, error) {
	<-l.closed
	return nil, net.ErrClosed
}

func (l *idleListener) Close() error {
	l.closeOnce.Do(func() { close(l.closed) })
	return nil
}

// Addr is a loopback address no one can dial.
func (l *idleListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)} }

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
