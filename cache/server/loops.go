package server

import (
	"context"
	"sync"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apiextensionsinformers "k8s.io/apiextensions-apiserver/pkg/client/informers/externalversions/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/klog/v2"

	"github.com/kcp-cache/kcp-cache/cache/server/bootstrap"
	"github.com/kcp-cache/kcp-cache/cache/server/removal"
	"github.com/kcp-cache/kcp-cache/cache/server/shardmetrics"
)

// The post-start hooks that start the server's own loops; /readyz lists
// each as poststarthook/<name>.
const (
	// BootstrapHookName installs the bootstrapped CRDs; it is done once
	// every one is served or in conflict.
	BootstrapHookName = "kcp-cache-bootstrap-crds"
	// CRDSourceHookName waits for the CRD informer's first list, which the
	// data plane counts as a pending source until then; /readyz reports it
	// until that list is handled. It stands in for upstream's
	// crd-informer-synced (upstreamCRDSyncedHook), and ends without an
	// error when the server stops first.
	CRDSourceHookName = "kcp-cache-crd-source"
	// ExportedResourcesHookName serves the identity resources that cached
	// APIExports and CachedResources declare, and the resources
	// CachedResources publish, without identity.
	ExportedResourcesHookName = "kcp-cache-exported-resources"
	// CRDPurgeHookName deletes the remaining objects of CRDs being deleted.
	CRDPurgeHookName = "kcp-cache-crd-purger"
	// ShardPurgerHookName purges the partitions of shards that are gone.
	ShardPurgerHookName = "kcp-cache-shard-purger"
	// TypeReaperHookName removes runtime types that hold no objects.
	TypeReaperHookName = "kcp-cache-type-reaper"
	// EpochHookName records the highest etcd revision seen in the epoch.
	EpochHookName = "kcp-cache-epoch"
	// ShardMetricsHookName keeps the per-shard gauges from the heartbeats.
	ShardMetricsHookName = "kcp-cache-shard-metrics"
	// HomeRevisionHookName follows etcd for the revision of each
	// partition's data of each type, which mirrors ask this cache for.
	HomeRevisionHookName = "kcp-cache-home-revision"
	// FileReloadHookName follows the files of credentials that upstream's
	// serving does not: the token file, the peers' kubeconfigs and a
	// mounted cache's client CA.
	FileReloadHookName = "kcp-cache-file-reload"
)

// loops owns every goroutine the server starts for work of its own, as
// upstream's post-start hooks own its controllers. Each loop starts from a
// post-start hook, so only a server that runs starts any, with a context
// that ends when the API server starts shutting down or stop is called,
// whichever is first. stop returns once every loop has returned: only then
// may the server release what loops use (storage, the etcd client, the
// embedded etcd).
type loops struct {
	logger klog.Logger
	// ctx ends at stop, for loops whose hook context is still live (stop
	// before Run ended).
	ctx    context.Context
	cancel context.CancelFunc

	mu      sync.Mutex
	stopped bool
	running sync.WaitGroup
}

func newLoops(logger klog.Logger) *loops {
	ctx, cancel := context.WithCancel(context.Background())
	return &loops{logger: logger, ctx: ctx, cancel: cancel}
}

// add runs loop from the post-start hook name until its context ends.
func (l *loops) add(server *genericapiserver.GenericAPIServer, name string, loop func(context.Context)) error {
	return server.AddPostStartHook(name, func(hookCtx genericapiserver.PostStartHookContext) error {
		l.start(hookCtx, loop)
		return nil
	})
}

// addUntilDone runs work from the post-start hook name, which returns when
// work does: /readyz reports the hook until then. A server that stops
// first ends the hook without an error: upstream ends the process when a
// post-start hook fails.
func (l *loops) addUntilDone(server *genericapiserver.GenericAPIServer, name string, work func(context.Context) error) error {
	return server.AddPostStartHook(name, func(hookCtx genericapiserver.PostStartHookContext) error {
		done := make(chan error, 1)
		l.start(hookCtx, func(ctx context.Context) { done <- work(ctx) })
		select {
		case err := <-done:
			if hookCtx.Err() != nil {
				return nil
			}
			return err
		case <-hookCtx.Done():
			return nil
		}
	})
}

// start runs loop in a goroutine of its own, with parent's values and the
// server's logger, unless stop was called.
func (l *loops) start(parent context.Context, loop func(context.Context)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped {
		return
	}
	ctx, cancel := context.WithCancel(klog.NewContext(parent, l.logger))
	stopWithServer := context.AfterFunc(l.ctx, cancel)
	l.running.Go(func() {
		defer cancel()
		defer stopWithServer()
		loop(ctx)
	})
}

// stop ends every loop's context and waits until all have returned. No
// loop starts after it.
func (l *loops) stop() {
	l.mu.Lock()
	l.stopped = true
	l.mu.Unlock()
	l.cancel()
	l.running.Wait()
}

// loop is one of the server's loops and the post-start hook that starts it.
type loop struct {
	hook string
	run  func(context.Context)
}

// together runs every one of runs in a goroutine of its own and returns
// once all have returned, for one post-start hook to own several loops.
func together(runs []func(context.Context)) func(context.Context) {
	return func(ctx context.Context) {
		var wg sync.WaitGroup
		defer wg.Wait()
		for _, run := range runs {
			wg.Go(func() { run(ctx) })
		}
	}
}

// startLoops declares every loop of the server's own, each started from its
// post-start hook. Several servers on one etcd each run the removal loops;
// their deletions are idempotent.
func (s *Server) startLoops(ctx context.Context, c CompletedConfig, crdInformer apiextensionsinformers.CustomResourceDefinitionInformer) error {
	loopback := s.GenericAPIServer.LoopbackClientConfig
	boot := bootstrap.NewInstaller(c.extra.BootstrapCRDs)
	crdsSynced, exported, err := s.servePlane(ctx, crdInformer.Informer(), c.extra.BootstrapCRDs, boot)
	if err != nil {
		return err
	}
	shardMetrics, err := shardmetrics.NewWatcher(loopback, s.epoch.Epoch)
	if err != nil {
		return err
	}
	crdClient, err := apiextensionsclient.NewForConfig(loopback)
	if err != nil {
		return err
	}
	prefix, retention := c.derived.storage.Prefix, c.extra.Removal
	shardPurger := removal.NewShardPurger(removal.ShardPurgerConfig{
		Client:    s.etcdClient,
		Prefix:    prefix,
		Retention: retention.ShardRetention,
		Interval:  retention.CheckInterval,
	})
	typeReaper := removal.NewTypeReaper(removal.TypeReaperConfig{
		KV:           s.etcdClient,
		Prefix:       prefix,
		Retention:    retention.TypeRetention,
		Interval:     retention.CheckInterval,
		Bootstrapped: c.bootstrapped,
		CRDs: func() ([]*apiextensionsv1.CustomResourceDefinition, error) {
			return crdInformer.Lister().List(labels.Everything())
		},
		Delete: func(ctx context.Context, crd *apiextensionsv1.CustomResourceDefinition) error {
			return crdClient.ApiextensionsV1().CustomResourceDefinitions().Delete(ctx, crd.Name, metav1.DeleteOptions{
				Preconditions: &metav1.Preconditions{UID: &crd.UID, ResourceVersion: &crd.ResourceVersion},
			})
		},
	})

	if err := s.loops.addUntilDone(s.GenericAPIServer, BootstrapHookName, func(ctx context.Context) error {
		return boot.Run(ctx, loopback)
	}); err != nil {
		return err
	}
	if err := s.loops.addUntilDone(s.GenericAPIServer, CRDSourceHookName, func(ctx context.Context) error {
		crdsSynced(ctx)
		return nil
	}); err != nil {
		return err
	}
	for _, l := range []loop{
		{ExportedResourcesHookName, exported},
		{CRDPurgeHookName, removal.NewCRDPurger(crdInformer, loopback).Run},
		{ShardPurgerHookName, shardPurger.Run},
		{TypeReaperHookName, typeReaper.Run},
		{EpochHookName, s.epoch.Run},
		{ShardMetricsHookName, shardMetrics.Run},
		{MirrorHookName, s.runMirror},
		{HomeRevisionHookName, s.homeRevisions.Run},
		{FileReloadHookName, together(c.derived.reloads)},
	} {
		if err := s.loops.add(s.GenericAPIServer, l.hook, l.run); err != nil {
			return err
		}
	}
	return nil
}
