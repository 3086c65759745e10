package shardserver

import (
	"context"
	"fmt"
	"path/filepath"

	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/client"
	"github.com/kcp-cache/kcp-cache/cache/hook"
	"github.com/kcp-cache/kcp-cache/cache/options"
	"github.com/kcp-cache/kcp-cache/cache/replication"
	"github.com/kcp-cache/kcp-cache/cache/server"
	"github.com/kcp-cache/kcp-cache/cache/server/bootstrap"
	"github.com/kcp-cache/kcp-cache/cache/server/standin"
)

// Shard is a running stand-in for a kcp shard.
type Shard struct {
	name    string
	host    *server.Server
	mounted *server.Server
	hook    *hook.Hook
	local   *client.InformerFactory
	// cacheKubeconfig reaches the in-process cache, for other shards.
	cacheKubeconfig string
}

// New builds the shard's API server, the in-process cache when asked for,
// the cache hook and the example controller. It starts the shard's etcd
// (and the cache's, if it has its own) but serves nothing yet; on error it
// stops them again, on success the caller must Run or Close the shard.
func New(ctx context.Context, o CompletedOptions) (_ *Shard, err error) {
	shardName := o.Cache.ShardName
	hostCfg, err := server.NewConfig(o.Server)
	if err != nil {
		return nil, err
	}
	// The default CRDs hold every type the example uses, APIBindings (and
	// the user-read types) included.
	hostCfg.Extra.BootstrapCRDs = bootstrap.DefaultCRDs()

	var mount *server.Mount
	var mountedCfg *server.Config
	if o.Cache.RunCacheServer {
		mount = &server.Mount{}
		if mountedCfg, err = newMountedCacheConfig(o, hostCfg); err != nil {
			return nil, err
		}
	}

	s := &Shard{name: shardName}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	if s.host, err = hostCfg.Complete().New(ctx); err != nil {
		return nil, err
	}
	standin.Serve(s.host, shardName, mount)
	if mountedCfg != nil {
		if s.mounted, err = mountedCfg.Complete().New(ctx); err != nil {
			return nil, err
		}
		mount.Serve(s.mounted)
		// Other shards push to this one's cache with the shard's admin
		// kubeconfig: the mounted cache accepts the host's credentials.
		s.cacheKubeconfig = s.host.KubeconfigPath()
	}

	cacheConfig, err := cacheRESTConfig(o, s.mounted)
	if err != nil {
		return nil, err
	}
	localClient, err := client.NewForConfigWithPaths(s.host.AdminConfig(), clusterPaths)
	if err != nil {
		return nil, err
	}
	s.local = client.NewInformerFactory(localClient, kcpcache.Scope{Shard: shardName, Cluster: kcpcache.Wildcard}, 0)
	hookCfg := hook.Config{
		Shard:        shardName,
		CacheConfig:  cacheConfig,
		LocalSources: replication.FactorySources(s.local),
	}
	if o.UserRead != nil && o.UserRead.Enabled() {
		var userRead replication.UserReadConfig
		if err := o.UserRead.ApplyTo(&userRead); err != nil {
			return nil, err
		}
		hookCfg.UserRead, hookCfg.UserReadTypes = userRead.Marking, userRead.Types
	}
	if s.hook, err = hook.New(hookCfg); err != nil {
		return nil, err
	}
	if err := s.hook.Install(s.host.GenericAPIServer); err != nil {
		return nil, err
	}
	bindings := NewBindingController(shardName, s.local, s.hook.GlobalInformers(), localClient)
	if err := s.host.GenericAPIServer.AddPostStartHook("example-apibinding-controller", func(hookCtx genericapiserver.PostStartHookContext) error {
		ctx := klog.NewContext(hookCtx, klog.FromContext(ctx).WithValues("shard", shardName))
		s.local.Start(ctx)
		go bindings.Run(ctx)
		return nil
	}); err != nil {
		return nil, err
	}
	return s, nil
}

// clusterPaths addresses the shard's own objects the way kcp does.
func clusterPaths(scope kcpcache.Scope) string {
	return "/" + kcpcache.ClustersSegment + "/" + scope.Cluster
}

// newMountedCacheConfig configures the cache served in-process, in the
// shard's etcd under its own prefix or in an embedded etcd of its own.
func newMountedCacheConfig(o CompletedOptions, hostCfg *server.Config) (*server.Config, error) {
	cacheOpts := options.NewOptions()
	cacheOpts.RootDirectory = filepath.Join(o.Server.RootDirectory, "cache")
	if dir := o.Cache.CacheEmbeddedEtcdDirectory; dir != "" {
		cacheOpts.EmbeddedEtcd.Directory = dir
		cacheOpts.EmbeddedEtcd.ClientPort, cacheOpts.EmbeddedEtcd.PeerPort = 0, 0
	} else {
		// The shard's etcd, embedded or not.
		cacheOpts.Etcd.StorageConfig.Transport = hostCfg.EtcdTransport()
		cacheOpts.Etcd.StorageConfig.Prefix = o.Cache.CacheEtcdPrefix
	}
	completed, err := cacheOpts.Complete()
	if err != nil {
		return nil, err
	}
	generic := hostCfg.Apiextensions.GenericConfig
	return server.NewMountedConfig(completed, server.Host{
		LoopbackClientConfig: generic.LoopbackClientConfig,
		Authenticator:        generic.Authentication.Authenticator,
		Authorizer:           generic.Authorization.Authorizer,
		Shard:                o.Cache.ShardName,
	})
}

// cacheRESTConfig says how the shard reaches the cache.
func cacheRESTConfig(o CompletedOptions, mounted *server.Server) (*rest.Config, error) {
	switch {
	case o.Cache.CacheKubeconfig != "":
		return client.ConfigFromKubeconfig(o.Cache.CacheKubeconfig, "")
	case o.Cache.CacheURL != "":
		return client.ConfigFromURL(o.Cache.CacheURL)
	case mounted != nil:
		// The shard's own identity: it may write only its partition.
		return mounted.HostShardConfig(), nil
	}
	return nil, fmt.Errorf("no cache configured")
}

// Run serves until ctx is done. The in-process cache stops first, then the
// host, whose etcd the cache may share; a host that fails stops the cache.
func (s *Shard) Run(ctx context.Context) error {
	if s.mounted == nil {
		return s.host.PrepareRun().Run(ctx)
	}
	// Replication stops first: it writes into the in-process cache.
	return server.RunMounted(ctx, s.host, s.mounted, s.hook.Stop)
}

// Close stops whatever New started and Run has not stopped: the mounted
// cache first, then the host. It is safe to call more than once.
func (s *Shard) Close() {
	if s.mounted != nil {
		s.mounted.Close()
	}
	if s.host != nil {
		s.host.Close()
	}
}

// Name is the shard's name.
func (s *Shard) Name() string { return s.name }

// AdminConfig reaches the shard's root as its admin; append
// /clusters/{cluster} for its objects, /services/cache/... for an
// in-process cache.
func (s *Shard) AdminConfig() *rest.Config { return s.host.AdminConfig() }

// CacheKubeconfig is a kubeconfig for the in-process cache ("" without one).
func (s *Shard) CacheKubeconfig() string { return s.cacheKubeconfig }

// Hook is the cache hook: global informers and degraded status.
func (s *Shard) Hook() *hook.Hook { return s.hook }
