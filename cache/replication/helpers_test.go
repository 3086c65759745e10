package replication

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/client"
	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
)

// pollTimeout bounds every wait for convergence; convergence normally takes
// milliseconds, a cache restart a few seconds.
const pollTimeout = cachetest.DefaultTimeout

var (
	schemasGVR = schema.GroupVersionResource{Group: "apis.kcp.io", Version: "v1alpha1", Resource: "apiresourceschemas"}
	widgetsGVR = schema.GroupVersionResource{Group: cachetest.WidgetNames.Group, Version: cachetest.WidgetNames.Version, Resource: cachetest.WidgetNames.Resource}
)

// harness is the world of an integration test: a cache server, and a second
// server standing in for the shards, which keep their local objects under
// shards/{shard}/clusters/{cluster} on it.
type harness struct {
	cache *cachetest.Server
	local *cachetest.Server
	// cacheAdmin reads and writes the cache directly, as another client
	// would; it is never part of a simulated outage.
	cacheAdmin *client.ClusterClient
	localAdmin *client.ClusterClient
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	h := &harness{cache: cachetest.StartServer(t), local: cachetest.StartServer(t)}
	h.cacheAdmin = clusterClient(t, h.cache.Config())
	h.localAdmin = clusterClient(t, h.local.Config())
	return h
}

// clusterClient is a ClusterClient without client-side rate limiting: the
// tests measure the controller, not client-go's default 5 QPS.
func clusterClient(t testing.TB, cfg *rest.Config) *client.ClusterClient {
	t.Helper()
	cfg = client.Unthrottled(cfg)
	c, err := client.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// shard is one running replication controller and its shard's local objects.
type shard struct {
	name  string
	h     *harness
	ctrl  *Controller
	local *client.InformerFactory
	// selected mirrors the controller's selection, for the mirror check.
	selected func(cluster string, obj *unstructured.Unstructured) bool
	gvrs     []schema.GroupVersionResource
	stop     func()
}

type shardOption func(*Config, *rest.Config)

// withOutage routes the controller's cache traffic through o.
func withOutage(o *outage) shardOption {
	return func(_ *Config, cacheCfg *rest.Config) {
		cacheCfg.Wrap(o.wrap)
		cacheCfg.Dial = o.Dial
	}
}

// startShard runs a replication controller for shard name and waits for its
// initial sync.
func startShard(t *testing.T, h *harness, name string, opts ...shardOption) *shard {
	t.Helper()
	s := newShard(t, h, name, opts...)
	s.start(t)
	return s
}

func newShard(t *testing.T, h *harness, name string, opts ...shardOption) *shard {
	t.Helper()
	localFactory := client.NewInformerFactory(h.localAdmin, kcpcache.Scope{Shard: name, Cluster: kcpcache.Wildcard}, 0)
	cacheCfg := h.cache.Config()
	cfg := &Config{Shard: name, LocalSources: FactorySources(localFactory)}
	for _, o := range opts {
		o(cfg, cacheCfg)
	}
	cfg.CacheClient = clusterClient(t, cacheCfg)
	ctrl, err := NewController(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s := &shard{name: name, h: h, ctrl: ctrl, local: localFactory}
	for _, r := range cfg.resources() {
		s.gvrs = append(s.gvrs, r.GVR)
	}
	s.selected = func(cluster string, obj *unstructured.Unstructured) bool {
		if !cfg.ReplicateSystemClusters && strings.HasPrefix(cluster, "system:") {
			return false
		}
		for _, r := range cfg.resources() {
			if r.GVR.GroupVersion().String() == obj.GetAPIVersion() && r.Filter != nil {
				return r.Filter(obj)
			}
		}
		return true
	}
	return s
}

// start runs the controller until stop or the end of the test, and waits
// until its initial sync is done.
func (s *shard) start(t *testing.T) {
	t.Helper()
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(4)))
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.ctrl.Run(ctx, DefaultWorkers)
	}()
	s.local.Start(ctx)
	s.stop = func() {
		cancel()
		<-done
		s.local.Shutdown()
	}
	t.Cleanup(s.stop)
	select {
	case <-s.ctrl.InitialSyncDone():
	case <-time.After(pollTimeout):
		t.Fatalf("shard %s: initial sync not done within %v", s.name, pollTimeout)
	}
}

// restart replaces the controller with a new one of the same configuration,
// as a shard that comes back up does.
func (s *shard) restart(t *testing.T, opts ...shardOption) {
	t.Helper()
	s.stop()
	*s = *newShard(t, s.h, s.name, opts...)
	s.start(t)
}

// localClient writes the shard's own objects in cluster.
func (s *shard) localClient(cluster string, gvr schema.GroupVersionResource) dynamic.NamespaceableResourceInterface {
	return s.h.localAdmin.Cluster(s.name, cluster).Resource(gvr)
}

// cacheClient reads and tampers with the shard's copies in cluster.
func (s *shard) cacheClient(cluster string, gvr schema.GroupVersionResource) dynamic.NamespaceableResourceInterface {
	return s.h.cacheAdmin.Cluster(s.name, cluster).Resource(gvr)
}

// mirrorDiff compares the shard's selected local objects with its partition
// of the cache and describes every difference: a missing or extra copy, a
// copy with other content, identity or provenance.
func (s *shard) mirrorDiff(ctx context.Context) error {
	var problems []string
	for _, gvr := range s.gvrs {
		locals, err := s.h.localAdmin.Cluster(s.name, kcpcache.Wildcard).Resource(gvr).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		copies, err := s.h.cacheAdmin.Cluster(s.name, kcpcache.Wildcard).Resource(gvr).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		byKey := map[string]*unstructured.Unstructured{}
		for i := range copies.Items {
			byKey[placement(&copies.Items[i])] = &copies.Items[i]
		}
		for i := range locals.Items {
			l := &locals.Items[i]
			k := placement(l)
			c := byKey[k]
			delete(byKey, k)
			if !s.selected(l.GetAnnotations()[kcpcache.AnnotationCluster], l) {
				if c != nil {
					problems = append(problems, gvr.Resource+" "+k+": copy of an unselected object")
				}
				continue
			}
			if p := copyProblem(s.name, l, c); p != "" {
				problems = append(problems, gvr.Resource+" "+k+": "+p)
			}
		}
		for k := range byKey {
			problems = append(problems, gvr.Resource+" "+k+": copy without a local object")
		}
	}
	if len(problems) == 0 {
		return nil
	}
	sort.Strings(problems)
	return errors.New(strings.Join(problems, "; "))
}

// copyProblem describes how c fails to be the copy of local, or "".
func copyProblem(shard string, local, c *unstructured.Unstructured) string {
	if c == nil {
		return "no copy"
	}
	created, localCreated := c.GetCreationTimestamp(), local.GetCreationTimestamp()
	switch {
	case c.GetUID() != local.GetUID():
		return fmt.Sprintf("copy UID %s, want the origin's %s", c.GetUID(), local.GetUID())
	case c.GetGeneration() != local.GetGeneration():
		return fmt.Sprintf("copy generation %d, want %d", c.GetGeneration(), local.GetGeneration())
	case !created.Equal(&localCreated):
		return "copy creationTimestamp differs"
	case c.GetAnnotations()[kcpcache.AnnotationOriginalResourceVersion] != local.GetResourceVersion():
		return fmt.Sprintf("original-resource-version %q, want %q", c.GetAnnotations()[kcpcache.AnnotationOriginalResourceVersion], local.GetResourceVersion())
	case c.GetAnnotations()[kcpcache.AnnotationOriginalResourceUID] != string(local.GetUID()):
		return "original-resource-UID differs"
	case c.GetAnnotations()[kcpcache.AnnotationShard] != shard:
		return fmt.Sprintf("copy placed in shard %q, want %q", c.GetAnnotations()[kcpcache.AnnotationShard], shard)
	case !equality.Semantic.DeepEqual(c.Object["spec"], local.Object["spec"]):
		return fmt.Sprintf("spec differs: local %v, copy %v", local.Object["spec"], c.Object["spec"])
	case !equality.Semantic.DeepEqual(c.Object["status"], local.Object["status"]):
		return fmt.Sprintf("status differs: local %v, copy %v", local.Object["status"], c.Object["status"])
	case !equality.Semantic.DeepEqual(c.GetLabels(), local.GetLabels()):
		return fmt.Sprintf("labels differ: local %v, copy %v", local.GetLabels(), c.GetLabels())
	case !equality.Semantic.DeepEqual(originAnnotations(c), originAnnotations(local)):
		return fmt.Sprintf("annotations differ: local %v, copy %v", local.GetAnnotations(), c.GetAnnotations())
	case !equality.Semantic.DeepEqual(c.GetManagedFields(), local.GetManagedFields()):
		return fmt.Sprintf("managedFields differ: local %v, copy %v", managerNames(local), managerNames(c))
	}
	return ""
}

func managerNames(u *unstructured.Unstructured) []string {
	var out []string
	for _, e := range u.GetManagedFields() {
		out = append(out, e.Manager+"/"+string(e.Operation)+"@"+e.Time.UTC().Format(time.RFC3339))
	}
	return out
}

// ownership is field ownership as a shard's server records it.
func ownership(manager string, at time.Time, fields string) metav1.ManagedFieldsEntry {
	return metav1.ManagedFieldsEntry{Manager: manager, Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: exportsGVR.GroupVersion().String(),
		Time: &metav1.Time{Time: at}, FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(fields)}}
}

// originAnnotations are an object's annotations without the ones the cache
// and the replication set (placement and provenance): what a copy must
// carry unchanged from its origin.
func originAnnotations(u *unstructured.Unstructured) map[string]string {
	out := map[string]string{}
	for k, v := range u.GetAnnotations() {
		switch k {
		case kcpcache.AnnotationShard, kcpcache.AnnotationCluster, kcpcache.AnnotationOriginalResourceVersion, kcpcache.AnnotationOriginalResourceUID:
		default:
			out[k] = v
		}
	}
	return out
}

// placement renders where an object lives: cluster/[namespace/]name.
func placement(u *unstructured.Unstructured) string {
	p := u.GetAnnotations()[kcpcache.AnnotationCluster] + "/"
	if ns := u.GetNamespace(); ns != "" {
		p += ns + "/"
	}
	return p + u.GetName()
}

// waitMirrored waits until the shard's partition mirrors its local objects.
func (s *shard) waitMirrored(t *testing.T) {
	t.Helper()
	cachetest.Eventually(t, "shard "+s.name+" mirrored in the cache", s.mirrorDiff)
}

// object builds a cluster-scoped or namespaced test object.
func object(gvr schema.GroupVersionResource, kind, namespace, name string, spec map[string]interface{}) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": gvr.GroupVersion().String(),
		"kind":       kind,
		"metadata":   map[string]interface{}{"name": name},
		"spec":       spec,
	}}
	u.SetNamespace(namespace)
	return u
}

func export(name, value string) *unstructured.Unstructured {
	return object(exportsGVR, "APIExport", "", name, map[string]interface{}{"value": value})
}

func mustCreate(t *testing.T, ri dynamic.ResourceInterface, u *unstructured.Unstructured) *unstructured.Unstructured {
	t.Helper()
	out, err := ri.Create(context.Background(), u, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating %s: %v", u.GetName(), err)
	}
	return out
}

// mustMutate reads, changes and writes an object, retrying on conflicts.
func mustMutate(t *testing.T, ri dynamic.ResourceInterface, name string, mutate func(*unstructured.Unstructured)) *unstructured.Unstructured {
	t.Helper()
	var out *unstructured.Unstructured
	cachetest.Eventually(t, "updating "+name, func(ctx context.Context) error {
		u, err := ri.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		mutate(u)
		out, err = ri.Update(ctx, u, metav1.UpdateOptions{})
		return err
	})
	return out
}

func mustDelete(t *testing.T, ri dynamic.ResourceInterface, name string) {
	t.Helper()
	if err := ri.Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatalf("deleting %s: %v", name, err)
	}
}

// outage makes the cache unreachable for one client: while down is set every
// request fails as a refused connection would, and cut closes the client's
// open connections, watches included, as the exit of a server process does.
type outage struct {
	cachetest.ConnTracker
	down atomic.Bool
	// refusedWrites counts writes refused while down.
	refusedWrites atomic.Int64
}

// cut closes every connection dialled so far.
func (o *outage) cut() { o.CutAll() }

func (o *outage) wrap(rt http.RoundTripper) http.RoundTripper {
	return cachetest.RoundTripperFunc(func(req *http.Request) (*http.Response, error) {
		if o.down.Load() {
			if req.Body != nil {
				_ = req.Body.Close()
			}
			if req.Method != http.MethodGet {
				o.refusedWrites.Add(1)
			}
			return nil, errors.New("simulated cache outage: connection refused")
		}
		return rt.RoundTrip(req)
	})
}
