package server

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	apiextensionsapiserver "k8s.io/apiextensions-apiserver/pkg/apiserver"
	"k8s.io/apiserver/pkg/admission"
	genericfeatures "k8s.io/apiserver/pkg/features"
	genericapiserver "k8s.io/apiserver/pkg/server"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/kcp-cache/kcp-cache/cache/server/dataplane"
	"github.com/kcp-cache/kcp-cache/cache/server/discovery"
	"github.com/kcp-cache/kcp-cache/cache/server/embeddedetcd"
	"github.com/kcp-cache/kcp-cache/cache/server/epoch"
	"github.com/kcp-cache/kcp-cache/cache/server/filters"
	"github.com/kcp-cache/kcp-cache/cache/server/homerevision"
	"github.com/kcp-cache/kcp-cache/cache/server/homes"
	"github.com/kcp-cache/kcp-cache/cache/server/mirror"
	"github.com/kcp-cache/kcp-cache/cache/server/partition"
	"github.com/kcp-cache/kcp-cache/cache/server/profiler"
)

// Server is a cache server that New built.
//
// Its lifecycle, in order: New starts the embedded etcd (if configured) and
// builds the API server on it; PrepareRun().Run serves until its context
// ends, then shuts down (see Close for the order); Close stops whatever is
// still running. Close is safe at any time and more than once: after New
// alone (a host that fails before Run), during Run (it ends Run and waits
// for it) and after Run. A host defers Close as soon as New succeeds.
type Server struct {
	// GenericAPIServer is the upstream server; hosts may add hooks and checks.
	GenericAPIServer *genericapiserver.GenericAPIServer

	apiextensions *apiextensionsapiserver.CustomResourceDefinitions
	etcd          *embeddedetcd.Server
	etcdTLS       *embeddedetcd.TLSFiles
	// etcdClient reaches the cache's etcd directly, for the epoch, data
	// removal and reading every identity of a published resource at once.
	etcdClient *clientv3.Client
	// loops are the server's own background loops.
	loops *loops
	epoch *epoch.Keeper
	plane *dataplane.Registry
	// homeRevisions follows the cache's etcd for the revision of each
	// partition's data, which mirrors of this cache ask for (hierarchy.go).
	homeRevisions *homerevision.Tracker
	// mirror pulls the partitions whose home is a peer; nil without peers.
	mirror *mirror.Mirror
	// homes is the table of home claims of a named cache; nil without a
	// name.
	homes       *homes.Table
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
// writes the admin kubeconfig. It changes nothing in c. On error,
// everything it started is stopped; on success the caller owns the server
// and must Run or Close it.
func (c CompletedConfig) New(ctx context.Context) (_ *Server, err error) {
	logger := klog.FromContext(ctx)
	s := &Server{kubeconfigPath: c.derived.kubeconfigPath, loops: newLoops(logger)}
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
	if s.etcdClient, err = newEtcdClient(c.derived.storage.Transport); err != nil {
		return nil, err
	}
	// Before any storage is built: the watch caches cannot start on the
	// layout kcp's cache-server left (kcplayout.Migrate).
	if err := migrateKCPLayout(ctx, s.etcdClient, c.derived.storage.Prefix); err != nil {
		return nil, err
	}
	if s.epoch, err = epoch.NewKeeper(s.etcdClient, c.derived.storage.Prefix, c.derived.epochFile); err != nil {
		return nil, err
	}
	if err := s.epoch.Resolve(ctx); err != nil {
		return nil, err
	}
	s.homeRevisions = homerevision.NewTracker(s.etcdClient, c.derived.storage.Prefix)

	upstream := c.upstream()
	generic := upstream.GenericConfig
	// Every create and update, the CRD API's and the data plane's, is
	// stamped with its partition in admission, so that a dry run answers
	// as the real request (partition.Admission).
	if generic.AdmissionControl == nil {
		generic.AdmissionControl = partition.NewAdmission()
	} else {
		generic.AdmissionControl = admission.NewChainHandler(partition.NewAdmission(), generic.AdmissionControl)
	}
	// The data plane authorizes and admits exactly as the generic chain.
	s.plane = dataplane.NewRegistry(dataplane.Config{
		RESTOptionsGetter:   generic.RESTOptionsGetter,
		Authorizer:          generic.Authorization.Authorizer,
		Admission:           generic.AdmissionControl,
		MaxRequestBodyBytes: maxObjectRequestBytes(generic.MaxRequestBodyBytes),
		MinRequestTimeout:   time.Duration(generic.MinRequestTimeout) * time.Second,
		Lists:               c.extra.Lists,
		ServeCBOR:           utilfeature.DefaultFeatureGate.Enabled(genericfeatures.CBORServingAndStorage),
	})
	// The bootstrapped types' watch caches start to fill now, beside the
	// build of the API server below, rather than after it: the fill is
	// most of a start.
	planeCtx := klog.NewContext(ctx, logger.WithName("dataplane"))
	for _, res := range bootstrappedResources(c.extra.BootstrapCRDs) {
		if err := s.plane.Pin(planeCtx, res); err != nil {
			s.plane.Destroy()
			return nil, err
		}
	}
	if s.homes, err = newHomes(ctx, c.extra.Hierarchy, s.etcdClient, c.derived.storage.Prefix, s.epoch.Epoch); err != nil {
		s.plane.Destroy()
		return nil, err
	}
	writes := &inProcess{}
	if s.mirror, err = newMirror(c.extra.Hierarchy, s.homes, generic.LoopbackClientConfig, inProcessConfig(generic.LoopbackClientConfig, writes), s.plane, storageRevision(s.etcdClient, c.derived.storage.Prefix), s.homeRevisions.Revision, s.epoch.Epoch); err != nil {
		s.plane.Destroy()
		return nil, err
	}
	chain := handlerChain{
		plane: s.plane, epoch: s.epoch.Epoch, bootstrapped: c.bootstrapped, syntheticDelay: c.extra.SyntheticDelay,
		mirror: s.mirror, homes: s.homes, storageRevision: storageRevision(s.etcdClient, c.derived.storage.Prefix), cacheName: c.extra.Hierarchy.CacheName, homeRevisions: s.homeRevisions,
		memoryFull: memoryFull(c.extra.MemoryLimit),
	}
	if ec := c.derived.embeddedEtcd; ec != nil && ec.Majority != nil {
		chain.majority, chain.member = ec.Majority, ec.Group.Name
	}
	if ec := c.derived.embeddedEtcd; ec != nil && !ec.InMemory && c.extra.MinFreeDiskBytes > 0 {
		chain.minFreeDisk, chain.disk = uint64(c.extra.MinFreeDiskBytes), &filters.DiskSampler{Directory: ec.Directory}
		logger.V(2).Info("Disk guard on: writes of partition objects are refused while less than minFreeBytes is free under the embedded etcd's directory", "directory", ec.Directory, "minFreeBytes", c.extra.MinFreeDiskBytes)
	}
	generic.BuildHandlerChainFunc = chain.build
	s.apiextensions, err = upstream.New(genericapiserver.NewEmptyDelegate())
	if err != nil {
		s.plane.Destroy()
		return nil, err
	}
	s.GenericAPIServer = s.apiextensions.GenericAPIServer
	writes.serve(s.GenericAPIServer.Handler)
	s.GenericAPIServer.RegisterDestroyFunc(s.plane.Destroy)
	s.serveHomeRevisions(c)
	s.serveBackup()
	crds := crdInformer(s.apiextensions)
	groups := discovery.NewGroupLister(crds.Lister(), s.GenericAPIServer.DiscoveryGroupManager)
	if err := groups.Start(ctx, crds.Informer()); err != nil {
		return nil, err
	}
	if err := discovery.StartAggregated(ctx, crds.Lister(), crds.Informer(), s.GenericAPIServer.AggregatedDiscoveryGroupManager); err != nil {
		return nil, err
	}
	if err := s.startLoops(ctx, c, crds); err != nil {
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
		s.adminConfig = adminRESTConfig(listenAddress(generic.SecureServing.Listener), c.derived.servingCAData, c.derived.adminToken)
	}
	if s.kubeconfigPath != "" {
		if err := WriteKubeconfig(s.kubeconfigPath, s.adminConfig); err != nil {
			return nil, fmt.Errorf("writing admin kubeconfig: %w", err)
		}
	}
	logger.Info("Cache server built", "address", s.adminConfig.Host, "kubeconfig", s.kubeconfigPath)
	return s, nil
}

// PreparedServer is a server whose handlers are complete.
type PreparedServer struct {
	s   *Server
	run func(context.Context) error
}

// PrepareRun finishes the handler setup (OpenAPI, health endpoints).
func (s *Server) PrepareRun() PreparedServer {
	return PreparedServer{s: s, run: s.GenericAPIServer.PrepareRun().RunWithContext}
}

// Run serves until ctx is done or Close is called, then shuts down
// gracefully, in the order Close states: the API server drains and stops
// first, the embedded etcd last. A server runs at most once; Run on a
// closed server returns ErrClosed at once. When the embedded etcd stops
// while the server runs, as etcd's embed.Etcd.Err tells its host, the
// server shuts down the same way and Run returns ErrEmbeddedEtcdStopped.
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
	etcdStopped := s.watchEmbeddedEtcd(ctx, cancel)
	err := p.run(ctx)
	cancel()
	if stopped := etcdStopped(); stopped != nil {
		return errors.Join(stopped, err)
	}
	return err
}

// Close stops the server, in this order:
//
//  1. A Run in progress ends: the API server stops serving and drains. Its
//     shutdown ends the post-start hooks' context, so every loop of the
//     server's own is told to stop, and last releases the storage.
//  2. Every loop has returned (those Run did not end are ended now).
//  3. The storage is released (Run usually has, and it is idempotent).
//  4. The epoch is recorded a last time, after the server's last write
//     (not when the embedded etcd stopped under the server).
//  5. The etcd client the loops and the epoch shared is closed.
//  6. The embedded etcd stops, after everything that used it.
//  7. The profiler stops last, so that all of the above can be profiled.
//
// After New alone nothing ran: the same steps release what New built. It
// is safe to call more than once.
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

// stop takes steps 2 to 7 of Close, once.
func (s *Server) stop() {
	s.stopOnce.Do(func() {
		s.loops.stop()
		if s.GenericAPIServer != nil {
			// Idempotent by contract (RegisterDestroyFunc).
			s.GenericAPIServer.Destroy()
		}
		if s.epoch != nil && !s.embeddedEtcdStopped() {
			s.epoch.Flush(context.Background())
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
