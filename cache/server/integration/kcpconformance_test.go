package integration_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
)

// The wire behaviour of a kcp v0.32.3 shard against its cache server
// (../shared/design/kcp-contract.md), written out by hand rather than taken
// from this repository's client, replication or type profile, so that the
// server is checked against kcp and not against itself.

// kcpReadTypes are the 21 types a kcp shard opens a wildcard informer on,
// under the versions kcp reads, plus the CRDs.
var kcpReadTypes = []schema.GroupVersionResource{
	{Group: "apis.kcp.io", Version: "v1alpha2", Resource: "apiexports"},
	{Group: "apis.kcp.io", Version: "v1alpha1", Resource: "apiresourceschemas"},
	{Group: "apis.kcp.io", Version: "v1alpha1", Resource: "apiconversions"},
	{Group: "apis.kcp.io", Version: "v1alpha1", Resource: "apiexportendpointslices"},
	{Group: "core.kcp.io", Version: "v1alpha1", Resource: "logicalclusters"},
	{Group: "core.kcp.io", Version: "v1alpha1", Resource: "shards"},
	{Group: "migration.kcp.io", Version: "v1alpha1", Resource: "logicalclustermigrations"},
	{Group: "cache.kcp.io", Version: "v1alpha1", Resource: "cachedobjects"},
	{Group: "cache.kcp.io", Version: "v1alpha1", Resource: "cachedresources"},
	{Group: "cache.kcp.io", Version: "v1alpha1", Resource: "cachedresourceendpointslices"},
	{Group: "tenancy.kcp.io", Version: "v1alpha1", Resource: "workspacetypes"},
	{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"},
	{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterrolebindings"},
	{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "roles"},
	{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "rolebindings"},
	{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "mutatingwebhookconfigurations"},
	{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingwebhookconfigurations"},
	{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "mutatingadmissionpolicies"},
	{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "mutatingadmissionpolicybindings"},
	{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingadmissionpolicies"},
	{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingadmissionpolicybindings"},
	{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"},
}

// kcpMainReadTypes are the types a shard of kcp main (August 2026) opens
// its wildcard informers on: v0.32's, with cachedresources and
// cachedresourceendpointslices renamed (kcp PR 4281; its
// pkg/cache/server/bootstrap and the cache informers of its pkg/server).
var kcpMainReadTypes = func() []schema.GroupVersionResource {
	renamed := map[string]string{
		"cachedresources":              "clustercachedresources",
		"cachedresourceendpointslices": "clustercachedresourceendpointslices",
	}
	out := slices.Clone(kcpReadTypes)
	for i, gvr := range out {
		if to, ok := renamed[gvr.Resource]; ok {
			out[i].Resource = to
		}
	}
	return out
}()

// kcpCopy is an object as kcp's replication controller pushes it.
type kcpCopy struct {
	gvr             schema.GroupVersionResource
	kind, namespace string
	name            string
}

// kcpWrites are copies of the types kcp replicates, with kcp's names (RBAC
// with ':'), in the versions kcp writes.
var kcpWrites = []kcpCopy{
	{schema.GroupVersionResource{Group: "apis.kcp.io", Version: "v1alpha2", Resource: "apiexports"}, "APIExport", "", "tenancy.kcp.io"},
	{schema.GroupVersionResource{Group: "apis.kcp.io", Version: "v1alpha1", Resource: "apiresourceschemas"}, "APIResourceSchema", "", "v250101-abcdef.workspaces.tenancy.kcp.io"},
	{schema.GroupVersionResource{Group: "apis.kcp.io", Version: "v1alpha1", Resource: "apiexportendpointslices"}, "APIExportEndpointSlice", "", "tenancy.kcp.io"},
	{schema.GroupVersionResource{Group: "core.kcp.io", Version: "v1alpha1", Resource: "shards"}, "Shard", "", "alpha"},
	{schema.GroupVersionResource{Group: "core.kcp.io", Version: "v1alpha1", Resource: "logicalclusters"}, "LogicalCluster", "", "cluster"},
	{schema.GroupVersionResource{Group: "tenancy.kcp.io", Version: "v1alpha1", Resource: "workspacetypes"}, "WorkspaceType", "", "universal"},
	{schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"}, "ClusterRole", "", "system:kcp:apiexport:tenancy:bind"},
	{schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterrolebindings"}, "ClusterRoleBinding", "", "system:kcp:authenticated:apiexport:tenancy:bind"},
	{schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingadmissionpolicies"}, "ValidatingAdmissionPolicy", "", "deny-all"},
}

// kcpShardClient is the shard's cache client: a system:masters client
// certificate, as kcp deployments hand out, and a recorder of every request.
type kcpShardClient struct {
	cfg *rest.Config

	mu       sync.Mutex
	requests []recordedRequest
}

type recordedRequest struct {
	method string
	url    *url.URL
	code   int
}

func newKcpShardClient(t *testing.T, srv *cachetest.Server, shard string) *kcpShardClient {
	c := &kcpShardClient{cfg: srv.UserConfig(t, "kcp-shard-"+shard, "system:masters")}
	c.cfg.QPS, c.cfg.Burst = 1000, 1000
	c.cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return cachetest.RoundTripperFunc(func(req *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(req)
			r := recordedRequest{method: req.Method, url: req.URL}
			if resp != nil {
				r.code = resp.StatusCode
			}
			c.mu.Lock()
			c.requests = append(c.requests, r)
			c.mu.Unlock()
			return resp, err
		})
	})
	return c
}

func (c *kcpShardClient) scoped(t *testing.T, shard, cluster string) *dynamic.DynamicClient {
	return cachetest.Dynamic(t, c.cfg, kcpcache.ScopedPathPrefix(kcpcache.Scope{Shard: shard, Cluster: cluster}))
}

// metadataScoped is the shard's metadata-only cache client, as kcp builds
// it for its CachedResource replication (CachePartialMetadataDDSIF).
func (c *kcpShardClient) metadataScoped(t *testing.T, shard, cluster string) *dynamic.DynamicClient {
	return cachetest.Dynamic(t, partialMetadataConfig(c.cfg), kcpcache.ScopedPathPrefix(kcpcache.Scope{Shard: shard, Cluster: cluster}))
}

// startInformers opens the shard's wildcard informers on types.
func (c *kcpShardClient) startInformers(ctx context.Context, t *testing.T, types []schema.GroupVersionResource) []*wildcardInformer {
	var informers []*wildcardInformer
	for _, gvr := range types {
		informers = append(informers, c.startWildcardInformer(ctx, t, gvr))
	}
	return informers
}

// checkWatchListFallback checks that the shard's informers on types asked
// as kcp does: a wildcard watch-list, refused with 400, then a list.
func (c *kcpShardClient) checkWatchListFallback(t *testing.T, types []schema.GroupVersionResource) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, gvr := range types {
		path := kcpcache.ScopedPathPrefix(kcpcache.Scope{Shard: "*", Cluster: "*"}) + groupVersionPath(gvr) + "/" + gvr.Resource
		var asked, listed bool
		for _, r := range c.requests {
			if r.url.Path != path {
				continue
			}
			q := r.url.Query()
			if q.Get("watch") == "true" && q.Get("sendInitialEvents") == "true" && q.Get("resourceVersionMatch") == "NotOlderThan" && q.Get("allowWatchBookmarks") == "true" {
				asked = true
				if r.code != http.StatusBadRequest {
					t.Errorf("%s: a wildcard watch-list answered %d, want 400", gvr.Resource, r.code)
				}
			}
			if r.method == http.MethodGet && q.Get("watch") == "" && r.code == http.StatusOK {
				listed = true
			}
		}
		if !asked || !listed {
			t.Errorf("%s: watch-list asked %t, listed %t; want both", gvr.Resource, asked, listed)
		}
	}
}

// clusterKey keys kcp's stores: logical cluster, namespace, name (kcp's
// client-go fork, MetaClusterNamespaceKeyFunc), never the shard.
func clusterKey(obj interface{}) (string, error) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		return d.Key, nil
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return "", err
	}
	return m.GetAnnotations()["kcp.io/cluster"] + "|" + m.GetNamespace() + "/" + m.GetName(), nil
}

// wildcardInformer is one of the shard's global informers: a reflector over
// "*/*" into a cluster-keyed store, with client-go's defaults (it asks for
// a watch-list first).
type wildcardInformer struct {
	gvr    schema.GroupVersionResource
	store  cache.Store
	synced func() bool
}

func (c *kcpShardClient) startWildcardInformer(ctx context.Context, t *testing.T, gvr schema.GroupVersionResource) *wildcardInformer {
	store, synced := startReflector(ctx, c.scoped(t, "*", "*").Resource(gvr), "kcp-global-"+gvr.Resource)
	return &wildcardInformer{gvr: gvr, store: store, synced: synced}
}

// startReflector runs a reflector over resource into a store keyed as
// kcp's are (clusterKey), with client-go's defaults, until ctx ends. synced
// reports whether it has listed.
func startReflector(ctx context.Context, resource dynamic.ResourceInterface, name string) (store cache.Store, synced func() bool) {
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return resource.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return resource.Watch(ctx, o)
		},
	}
	store = cache.NewStore(clusterKey)
	r := cache.NewReflectorWithOptions(lw, &unstructured.Unstructured{}, store, cache.ReflectorOptions{Name: name})
	go r.RunWithContext(ctx)
	return store, func() bool { return r.LastSyncResourceVersion() != "" }
}

// origin is the metadata of the object a copy mirrors.
var originCreated = metav1.NewTime(time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC))

func (w kcpCopy) object(shard, cluster string, spec map[string]interface{}) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": w.gvr.GroupVersion().String(),
		"kind":       w.kind,
		"metadata":   map[string]interface{}{"name": w.name},
		"spec":       spec,
	}}
	u.SetUID(types.UID("origin-" + w.gvr.Resource))
	u.SetCreationTimestamp(originCreated)
	u.SetGeneration(3)
	u.SetAnnotations(map[string]string{
		"kcp.io/shard":                           shard,
		"kcp.io/cluster":                         cluster,
		"kcp.io/path":                            "root:org",
		"cache.kcp.io/original-resource-UID":     "origin-" + w.gvr.Resource,
		"cache.kcp.io/original-resource-version": "41",
	})
	return u
}

func TestKcpShardConformance(t *testing.T) {
	t.Parallel()
	srv := cachetest.StartServer(t)
	ctx := testContext(t)
	// A kcp v0.32 shard and a kcp main shard on one cache, as during an
	// upgrade.
	shard := newKcpShardClient(t, srv, "alpha")
	mainShard := newKcpShardClient(t, srv, "beta")
	const shardName, cluster = "alpha", "2x8fvm1s2b3h4k5l"

	// 1. Every global informer of both syncs, as each shard's readiness
	// needs.
	informers := shard.startInformers(ctx, t, kcpReadTypes)
	mainInformers := mainShard.startInformers(ctx, t, kcpMainReadTypes)
	cachetest.Eventually(t, "every kcp informer synced", func(context.Context) error {
		var pending []string
		for _, i := range append(slices.Clone(informers), mainInformers...) {
			if !i.synced() {
				pending = append(pending, i.gvr.Resource)
			}
		}
		if len(pending) > 0 {
			return fmt.Errorf("not synced: %v", pending)
		}
		return nil
	})
	// They asked as kcp does; a wildcard watch-list is refused with 400 and
	// the informer falls back to list+watch.
	shard.checkWatchListFallback(t, kcpReadTypes)
	mainShard.checkWatchListFallback(t, kcpMainReadTypes)

	// 2. Copies: POST, PUT, DELETE into the shard's own partition.
	partition := shard.scoped(t, shardName, cluster)
	for _, w := range kcpWrites {
		created, err := partition.Resource(w.gvr).Create(ctx, w.object(shardName, cluster, map[string]interface{}{"v": "1"}), metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("POST %s %q: %v", w.gvr.Resource, w.name, err)
		}
		if created.GetUID() != types.UID("origin-"+w.gvr.Resource) || created.GetGeneration() != 3 || !created.GetCreationTimestamp().Time.Equal(originCreated.Time) {
			t.Errorf("%s: the copy lost the origin's uid, generation or creation time: %v %d %v", w.gvr.Resource, created.GetUID(), created.GetGeneration(), created.GetCreationTimestamp())
		}
		update := w.object(shardName, cluster, map[string]interface{}{"v": "2"})
		update.SetResourceVersion(created.GetResourceVersion())
		update.Object["status"] = map[string]interface{}{"phase": "Ready"}
		updated, err := partition.Resource(w.gvr).Update(ctx, update, metav1.UpdateOptions{})
		if err != nil {
			t.Fatalf("PUT %s %q: %v", w.gvr.Resource, w.name, err)
		}
		if updated.Object["spec"].(map[string]interface{})["v"] != "2" || updated.Object["status"] == nil || updated.GetGeneration() != 3 {
			t.Errorf("%s: PUT kept spec %v status %v generation %d; want spec and status replaced together, generation as sent", w.gvr.Resource, updated.Object["spec"], updated.Object["status"], updated.GetGeneration())
		}
	}
	// Every write landed in the shard's partition, under the storage key an
	// independent reader (etcd) sees, and reached the cluster-keyed stores.
	for _, w := range kcpWrites {
		key := fmt.Sprintf("%s/%s/%s/%s/%s/%s", srv.EtcdPrefix(), w.gvr.Group, w.gvr.Resource, shardName, cluster, w.name)
		if keys := srv.EtcdKeys(t, "/"+w.gvr.Group+"/"+w.gvr.Resource+"/"); !slices.Equal(keys, []string{key}) {
			t.Errorf("%s: etcd keys %v, want exactly %s", w.gvr.Resource, keys, key)
		}
	}
	cachetest.Eventually(t, "the informers see every copy, keyed by cluster", func(context.Context) error {
		for _, w := range kcpWrites {
			inf := informerFor(informers, w.gvr)
			obj, ok, err := inf.store.GetByKey(cluster + "|/" + w.name)
			if err != nil || !ok {
				return fmt.Errorf("%s %q not in the %s store (%v)", w.gvr.Resource, w.name, w.gvr.Resource, err)
			}
			if v := obj.(*unstructured.Unstructured).Object["spec"].(map[string]interface{})["v"]; v != "2" {
				return fmt.Errorf("%s: the store has spec.v=%v, want 2", w.gvr.Resource, v)
			}
		}
		return nil
	})

	// 3. Identity paths: an export's identity of a known resource reads.
	identity := shard.scoped(t, "*", "*").Resource(schema.GroupVersionResource{Group: "apis.kcp.io", Version: "v1alpha2", Resource: "apiexports:0123456789abcdef"})
	if list, err := identity.List(ctx, metav1.ListOptions{}); err != nil || len(list.Items) != 0 {
		t.Errorf("identity path: %v, %v; want an empty list", list, err)
	}

	// 4. DELETE removes a copy at once, finalizers notwithstanding.
	w := kcpWrites[0]
	withFinalizer := w.object(shardName, "finalized", nil)
	withFinalizer.SetFinalizers([]string{"core.kcp.io/some-finalizer"})
	if _, err := shard.scoped(t, shardName, "finalized").Resource(w.gvr).Create(ctx, withFinalizer, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{cluster, "finalized"} {
		if err := shard.scoped(t, shardName, c).Resource(w.gvr).Delete(ctx, w.name, metav1.DeleteOptions{}); err != nil {
			t.Fatalf("DELETE in %s: %v", c, err)
		}
		if _, err := shard.scoped(t, shardName, c).Resource(w.gvr).Get(ctx, w.name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("after DELETE in %s: %v, want NotFound", c, err)
		}
	}
	if keys := srv.EtcdKeys(t, "/"+w.gvr.Group+"/"+w.gvr.Resource+"/"); len(keys) != 0 {
		t.Errorf("after DELETE etcd still holds %v", keys)
	}
	cachetest.Eventually(t, "the deletion reached the informer", func(context.Context) error {
		if keys := informerFor(informers, w.gvr).store.ListKeys(); len(keys) != 0 {
			return fmt.Errorf("store still holds %v", keys)
		}
		return nil
	})

	// 5. Copies equal their originals field by field, managedFields
	// included, as kcp's TestReplication checks them. kcp's test polls until
	// they do; kcp's own cache records the writer on a POST and gets there
	// after kcp's next PUT, so here each write is checked at once.
	const copiesCluster = "3y9gwn2c4d5f6h7j"
	copies := shard.scoped(t, shardName, copiesCluster)
	for _, w := range kcpWrites {
		r := copies.Resource(w.gvr)
		original := w.original(copiesCluster, "41", map[string]interface{}{"v": "1"}, nil, originOwnership(w.gvr, originCreated.Time, false))
		if _, err := r.Create(ctx, kcpCreateBody(shardName, original), metav1.CreateOptions{}); err != nil {
			t.Fatalf("POST %s %q: %v", w.gvr.Resource, w.name, err)
		}
		cached, err := r.Get(ctx, w.name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if d := kcpReplicationDiff(w.gvr, original, cached); d != "" {
			t.Errorf("%s: after kcp's POST the copy differs from its original (-original +copy):\n%s", w.gvr.Resource, d)
		}

		// The original changes on the shard: new spec and status, field
		// ownership recorded anew. kcp PUTs the copy it has.
		changed := w.original(copiesCluster, "57", map[string]interface{}{"v": "2"}, map[string]interface{}{"phase": "Ready"}, originOwnership(w.gvr, originCreated.Time.Add(time.Hour), true))
		if _, err := r.Update(ctx, kcpUpdateBody(cached, changed), metav1.UpdateOptions{}); err != nil {
			t.Fatalf("PUT %s %q: %v", w.gvr.Resource, w.name, err)
		}
		if cached, err = r.Get(ctx, w.name, metav1.GetOptions{}); err != nil {
			t.Fatal(err)
		}
		if d := kcpReplicationDiff(w.gvr, changed, cached); d != "" {
			t.Errorf("%s: after kcp's PUT the copy differs from its original (-original +copy):\n%s", w.gvr.Resource, d)
		}

		// Someone edits the copy in the cache, as kcp's negative scenarios
		// do; kcp's controller PUTs the original's state back.
		cached.Object["spec"] = map[string]interface{}{"v": "tampered"}
		if cached, err = r.Update(ctx, cached, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("editing the %s copy: %v", w.gvr.Resource, err)
		}
		if _, err := r.Update(ctx, kcpUpdateBody(cached, changed), metav1.UpdateOptions{}); err != nil {
			t.Fatalf("PUT %s %q repairing it: %v", w.gvr.Resource, w.name, err)
		}
		if cached, err = r.Get(ctx, w.name, metav1.GetOptions{}); err != nil {
			t.Fatal(err)
		}
		if d := kcpReplicationDiff(w.gvr, changed, cached); d != "" {
			t.Errorf("%s: after kcp's repair the copy differs from its original (-original +copy):\n%s", w.gvr.Resource, d)
		}
	}

	// 6. Published resources (kcp's CacheAPIs): each shard pushes its
	// CachedResource (kcp main: ClusterCachedResource) with the identity
	// its controller set, then the published objects under
	// "<resource>:<identity>".
	published := []struct {
		client         *kcpShardClient
		shard, cluster string
		gvr            schema.GroupVersionResource
		kind, identity string
	}{
		{shard, shardName, cluster, cachedResourcesGVR, "CachedResource", "a1b2c3"},
		{mainShard, "beta", "7k2m9q4w", clusterCachedResourcesGVR, "ClusterCachedResource", "d4e5f6"},
	}
	for _, p := range published {
		partition := p.client.scoped(t, p.shard, p.cluster)
		if _, err := partition.Resource(p.gvr).Create(ctx, cachedResource(p.gvr, p.kind, "instances", p.identity), metav1.CreateOptions{}); err != nil {
			t.Fatalf("POST %s: %v", p.gvr.Resource, err)
		}
		cachetest.Eventually(t, "instances:"+p.identity+" accepts the copy", func(ctx context.Context) error {
			_, err := partition.Resource(instancesOf(p.identity)).Create(ctx, instance("web-server-1", "1"), metav1.CreateOptions{})
			return err
		})
	}
	// Each shard's replication of published objects opens a metadata-only
	// wildcard informer on the resource without identity: it lists and
	// watches every identity.
	for _, c := range []*kcpShardClient{shard, mainShard} {
		store, synced := startReflector(ctx, c.metadataScoped(t, "*", "*").Resource(instancesGVR), "kcp-cached-resource-global")
		cachetest.Eventually(t, "the identity-less metadata informer has both shards' copies", func(context.Context) error {
			keys := store.ListKeys()
			slices.Sort(keys)
			if want := []string{cluster + "|/web-server-1", "7k2m9q4w|/web-server-1"}; !synced() || !slices.Equal(keys, want) {
				return fmt.Errorf("synced %t, keys %v, want %v", synced(), keys, want)
			}
			return nil
		})
	}
	// A read by name in one partition, without identity (kcp's
	// TestReplicationWithWildcardListing).
	for _, p := range published {
		if _, err := p.client.scoped(t, p.shard, p.cluster).Resource(instancesGVR).Get(ctx, "web-server-1", metav1.GetOptions{}); err != nil {
			t.Errorf("GET %s/%s instances web-server-1 without identity: %v", p.shard, p.cluster, err)
		}
	}
}

// original is an object as a kcp shard serves it: its own resourceVersion,
// uid, creationTimestamp and generation, the cluster and path annotations,
// and the managedFields the shard's server recorded. It goes through JSON,
// so that it holds the value types a client decodes.
func (w kcpCopy) original(cluster, resourceVersion string, spec, status map[string]interface{}, managedFields []metav1.ManagedFieldsEntry) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": w.gvr.GroupVersion().String(),
		"kind":       w.kind,
		"metadata":   map[string]interface{}{"name": w.name},
		"spec":       spec,
	}}
	if status != nil {
		u.Object["status"] = status
	}
	u.SetUID(types.UID("origin-" + w.gvr.Resource))
	u.SetResourceVersion(resourceVersion)
	u.SetCreationTimestamp(originCreated)
	u.SetGeneration(3)
	u.SetAnnotations(map[string]string{"kcp.io/cluster": cluster, "kcp.io/path": "root:org"})
	u.SetManagedFields(managedFields)
	b, err := u.MarshalJSON()
	if err != nil {
		panic(err)
	}
	out := &unstructured.Unstructured{}
	if err := out.UnmarshalJSON(b); err != nil {
		panic(err)
	}
	return out
}

// originOwnership is field ownership as a kcp shard records it: the client
// that wrote the spec and path annotation, and kcp's status update through
// the status subresource when there is a status.
func originOwnership(gvr schema.GroupVersionResource, at time.Time, withStatus bool) []metav1.ManagedFieldsEntry {
	entry := func(manager string, at time.Time, subresource, fields string) metav1.ManagedFieldsEntry {
		return metav1.ManagedFieldsEntry{Manager: manager, Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: gvr.GroupVersion().String(),
			Time: &metav1.Time{Time: at}, FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(fields)}, Subresource: subresource}
	}
	out := []metav1.ManagedFieldsEntry{entry("e2e.test", at, "", `{"f:metadata":{"f:annotations":{".":{},"f:kcp.io/path":{}}},"f:spec":{".":{},"f:v":{}}}`)}
	if withStatus {
		out = append(out, entry("kcp", at.Add(time.Second), "status", `{"f:status":{".":{},"f:phase":{}}}`))
	}
	return out
}

// kcpCreateBody is what kcp's replication POSTs for a new original: the
// object with its resourceVersion cleared and the shard and provenance
// annotations added (pkg/reconciler/cache/replication, reconcile).
func kcpCreateBody(shard string, original *unstructured.Unstructured) *unstructured.Unstructured {
	u := original.DeepCopy()
	u.SetResourceVersion("")
	a := u.GetAnnotations()
	a["kcp.io/shard"] = shard
	a["cache.kcp.io/original-resource-version"] = original.GetResourceVersion()
	a["cache.kcp.io/original-resource-UID"] = string(original.GetUID())
	u.SetAnnotations(a)
	return u
}

// kcpUpdateBody is what kcp's replication PUTs when a copy differs from its
// original (ensureMeta, ensureRemaining): the original's metadata and
// content, with the copy's resourceVersion, uid, shard annotation and
// provenance annotations kept (the original-resource-version the copy had,
// not the original's new one).
func kcpUpdateBody(cached, original *unstructured.Unstructured) *unstructured.Unstructured {
	u := original.DeepCopy()
	u.SetResourceVersion(cached.GetResourceVersion())
	u.SetUID(cached.GetUID())
	a := u.GetAnnotations()
	for _, k := range []string{"kcp.io/shard", "cache.kcp.io/original-resource-version", "cache.kcp.io/original-resource-UID"} {
		if v, ok := cached.GetAnnotations()[k]; ok {
			a[k] = v
		}
	}
	u.SetAnnotations(a)
	return u
}

// kcpReplicationDiff compares a copy with its original by the rules of
// kcp's TestReplication (test/e2e/reconciler/cache, verifyResourceReplication
// Helper): the copy must carry the shard and provenance annotations; then
// resourceVersion is removed from both (generation too for RBAC), the shard
// and provenance annotations and an empty status from the copy, and
// everything else must be equal, managedFields included.
func kcpReplicationDiff(gvr schema.GroupVersionResource, original, cached *unstructured.Unstructured) string {
	o, c := original.DeepCopy(), cached.DeepCopy()
	for _, k := range []string{"kcp.io/shard", "cache.kcp.io/original-resource-version", "cache.kcp.io/original-resource-UID"} {
		if _, ok := c.GetAnnotations()[k]; !ok {
			return "the copy lacks the annotation " + k
		}
		unstructured.RemoveNestedField(c.Object, "metadata", "annotations", k)
	}
	unstructured.RemoveNestedField(o.Object, "metadata", "resourceVersion")
	unstructured.RemoveNestedField(c.Object, "metadata", "resourceVersion")
	if gvr.Group == "rbac.authorization.k8s.io" {
		unstructured.RemoveNestedField(o.Object, "metadata", "generation")
		unstructured.RemoveNestedField(c.Object, "metadata", "generation")
	}
	if status, ok := c.Object["status"]; ok {
		if m, isMap := status.(map[string]interface{}); status == nil || isMap && len(m) == 0 {
			delete(c.Object, "status")
		}
	}
	return cmp.Diff(o.Object, c.Object)
}

func informerFor(informers []*wildcardInformer, gvr schema.GroupVersionResource) *wildcardInformer {
	for _, i := range informers {
		if i.gvr == gvr {
			return i
		}
	}
	panic("no informer for " + gvr.String())
}

func groupVersionPath(gvr schema.GroupVersionResource) string {
	return "/apis/" + strings.TrimPrefix(gvr.GroupVersion().String(), "/")
}
