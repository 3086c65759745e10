package server

import (
	"context"
	"fmt"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apiextensionsinformers "k8s.io/apiextensions-apiserver/pkg/client/informers/externalversions/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/sets"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/kcp-cache/kcp-cache/cache/server/removal"
)

// Post-start hooks that run the data removal loops.
const (
	ShardPurgerHookName = "kcp-cache-shard-purger"
	TypeReaperHookName  = "kcp-cache-type-reaper"
)

// startRemoval runs the shard purger and the type reaper from post-start
// hooks until the server stops. Several servers on one etcd each run them;
// their deletions are idempotent.
func (s *Server) startRemoval(ctx context.Context, c CompletedConfig, crds apiextensionsinformers.CustomResourceDefinitionInformer, loopback *rest.Config) error {
	cfg := c.Extra.Removal
	if cfg.CheckInterval <= 0 {
		return fmt.Errorf("the removal check interval must be positive, got %s", cfg.CheckInterval)
	}
	client := s.etcdClient
	prefix := c.derived.storage.Prefix
	purger := removal.NewShardPurger(removal.ShardPurgerConfig{
		Client:    client,
		Prefix:    prefix,
		Retention: cfg.ShardRetention,
		Interval:  cfg.CheckInterval,
	})
	crdClient, err := apiextensionsclient.NewForConfig(loopback)
	if err != nil {
		return err
	}
	bootstrapped := sets.New[string]()
	for _, crd := range c.Extra.BootstrapCRDs {
		bootstrapped.Insert(crd.Name)
	}
	reaper := removal.NewTypeReaper(removal.TypeReaperConfig{
		KV:           client,
		Prefix:       prefix,
		Retention:    cfg.TypeRetention,
		Interval:     cfg.CheckInterval,
		Bootstrapped: bootstrapped,
		CRDs: func() ([]*apiextensionsv1.CustomResourceDefinition, error) {
			return crds.Lister().List(labels.Everything())
		},
		Delete: func(ctx context.Context, crd *apiextensionsv1.CustomResourceDefinition) error {
			return crdClient.ApiextensionsV1().CustomResourceDefinitions().Delete(ctx, crd.Name, metav1.DeleteOptions{
				Preconditions: &metav1.Preconditions{UID: &crd.UID, ResourceVersion: &crd.ResourceVersion},
			})
		},
	})
	logger := klog.FromContext(ctx)
	for name, run := range map[string]func(context.Context){ShardPurgerHookName: purger.Run, TypeReaperHookName: reaper.Run} {
		if err := s.GenericAPIServer.AddPostStartHook(name, func(hookCtx genericapiserver.PostStartHookContext) error {
			s.background.Go(func() { run(klog.NewContext(hookCtx, logger)) })
			return nil
		}); err != nil {
			return err
		}
	}
	return nil
}

// newEtcdClient reaches the etcd of t with its client TLS, if any.
func newEtcdClient(t storagebackend.TransportConfig) (*clientv3.Client, error) {
	// Errors come back to the callers, which log them; the client's own
	// zap logging would only repeat them outside the structured log.
	cfg := clientv3.Config{Endpoints: t.ServerList, DialTimeout: 20 * time.Second, Logger: zap.NewNop()}
	if t.CertFile != "" || t.KeyFile != "" || t.TrustedCAFile != "" {
		tlsConfig, err := transport.TLSInfo{CertFile: t.CertFile, KeyFile: t.KeyFile, TrustedCAFile: t.TrustedCAFile}.ClientConfig()
		if err != nil {
			return nil, err
		}
		cfg.TLS = tlsConfig
	}
	return clientv3.New(cfg)
}

// CRDPurgeHookName is the post-start hook that runs the CRD purger.
const CRDPurgeHookName = "kcp-cache-crd-purger"

// startCRDPurger runs the purger from a post-start hook, once the informer
// it follows is started.
func (s *Server) startCRDPurger(informer apiextensionsinformers.CustomResourceDefinitionInformer, loopback *rest.Config) error {
	p, err := removal.NewCRDPurger(informer, loopback)
	if err != nil {
		return err
	}
	return s.GenericAPIServer.AddPostStartHook(CRDPurgeHookName, func(hookCtx genericapiserver.PostStartHookContext) error {
		go p.Run(hookCtx)
		return nil
	})
}
