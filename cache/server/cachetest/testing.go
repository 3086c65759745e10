package cachetest

import (
	"context"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"net/http"
	"sort"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/options"
	"github.com/kcp-cache/kcp-cache/cache/server"
	"github.com/kcp-cache/kcp-cache/cache/server/bootstrap"
)

// Option changes the Options StartServer starts with.
type Option func(*Options)

// Mounted serves the cache under /services/cache/ of a host that holds
// shard's own objects, as a kcp shard with --run-cache-server does.
func Mounted(shard string) Option {
	return func(o *Options) { o.Mounted, o.HostShard = true, shard }
}

// WithConfig changes the cache server's configuration before it is
// completed, at every start.
func WithConfig(configure func(*server.Config)) Option {
	return func(o *Options) { o.Configure = configure }
}

// WithFlags changes the cache server's options (its flags) before every
// start: a token file, auditing, ...
func WithFlags(flags func(*options.Options)) Option {
	return func(o *Options) { o.Flags = flags }
}

// WhileStarting calls starting with the cache's admin config at every
// start, once the server is built and just before it runs (see
// Options.Starting).
func WhileStarting(starting func(*rest.Config)) Option {
	return func(o *Options) { o.Starting = starting }
}

// StartServer starts a Server for a test and stops it in t.Cleanup, failing
// the test if starting fails or Run returns an error. Servers log with
// klog's global logger, as before: their goroutines outlive log calls that
// a per-test logger would allow.
func StartServer(t testing.TB, opts ...Option) *Server {
	t.Helper()
	var o Options
	for _, opt := range opts {
		opt(&o)
	}
	ctx, cancel := context.WithTimeout(klog.NewContext(context.Background(), klog.Background()), DefaultTimeout)
	defer cancel()
	s, err := Start(ctx, o)
	if err != nil {
		t.Fatalf("starting the cache server: %v", err)
	}
	StopOnCleanup(t, "the cache server", s.Stop)
	return s
}

// StopOnCleanup calls stop when the test ends and fails the test if it
// returns an error: a server whose Run failed fails the test that ran it.
func StopOnCleanup(t testing.TB, what string, stop func() error) {
	t.Helper()
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("%s stopped with: %v", what, err)
		}
	})
}

// Dynamic is a dynamic client for cfg with pathPrefix appended to its host,
// for a partition ("/services/cache/shards/a/clusters/b") or a host's own
// objects ("/clusters/root").
func Dynamic(t testing.TB, cfg *rest.Config, pathPrefix string) *dynamic.DynamicClient {
	t.Helper()
	c := rest.CopyConfig(cfg)
	c.Host = kcpcache.JoinHostPath(c.Host, pathPrefix)
	d, err := dynamic.NewForConfig(c)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// RestartServer is Restart for a test: it fails the test on error.
func (s *Server) RestartServer(t testing.TB, opts ...Option) {
	t.Helper()
	s.restartForTest(t, s.Restart, opts)
}

// RestartServerUnready is RestartUnready for a test, for a server that must
// not become ready: it fails the test on error.
func (s *Server) RestartServerUnready(t testing.TB, opts ...Option) {
	t.Helper()
	s.restartForTest(t, s.RestartUnready, opts)
}

func (s *Server) restartForTest(t testing.TB, restart func(context.Context, ...Option) error, opts []Option) {
	t.Helper()
	ctx, cancel := context.WithTimeout(klog.NewContext(context.Background(), klog.Background()), DefaultTimeout)
	defer cancel()
	if err := restart(ctx, opts...); err != nil {
		t.Fatalf("restarting the cache server: %v", err)
	}
}

// EtcdKeys returns the sorted etcd keys below the cache prefix + prefix.
func (s *Server) EtcdKeys(t testing.TB, prefix string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), DefaultTimeout)
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

// InstallCRD serves a schema-less type, created at runtime through the
// unprefixed (system) path as an operator would, and waits until a
// partition serves it. A type that exists already is kept.
func (s *Server) InstallCRD(t testing.TB, names bootstrap.CRDNames) schema.GroupVersionResource {
	t.Helper()
	return s.InstallCRDObject(t, bootstrap.SchemalessCRD(names))
}

// InstallCRDObject is InstallCRD for a CRD built by the caller (several
// versions, annotations); it waits until the CRD's first version is served.
func (s *Server) InstallCRDObject(t testing.TB, crd *apiextensionsv1.CustomResourceDefinition) schema.GroupVersionResource {
	t.Helper()
	crds, err := apiextensionsclient.NewForConfig(s.Config())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := crds.ApiextensionsV1().CustomResourceDefinitions().Create(context.Background(), crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("creating CRD %s: %v", crd.Name, err)
	}
	gvr := schema.GroupVersionResource{Group: crd.Spec.Group, Version: crd.Spec.Versions[0].Name, Resource: crd.Spec.Names.Plural}
	probe := Dynamic(t, s.ScopedConfig("probe", "root"), "")
	Eventually(t, crd.Name+" served", func(ctx context.Context) error {
		_, err := probe.Resource(gvr).List(ctx, metav1.ListOptions{Limit: 1})
		return err
	})
	return gvr
}

// WidgetNames is a namespaced type tests install with InstallCRD.
var WidgetNames = bootstrap.CRDNames{Group: "example.dev", Version: "v1", Resource: "widgets", Kind: "Widget", Namespaced: true}

// RoundTripperFunc lets a function be an http.RoundTripper, to wrap a
// client's transport in a test.
type RoundTripperFunc func(*http.Request) (*http.Response, error)

// RoundTrip implements http.RoundTripper.
func (f RoundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }
