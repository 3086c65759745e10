package integration_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
)

// Resources that kcp's CachedResources publish, read without an identity,
// as kcp's CachedResource replication and kcp's e2e tests read them
// (test/e2e/cache/replication_api_cache_test.go in kcp v0.32.3).

var (
	cachedResourcesGVR        = schema.GroupVersionResource{Group: "cache.kcp.io", Version: "v1alpha1", Resource: "cachedresources"}
	clusterCachedResourcesGVR = schema.GroupVersionResource{Group: "cache.kcp.io", Version: "v1alpha1", Resource: "clustercachedresources"}
	instancesGVR              = schema.GroupVersionResource{Group: "machines.svm.io", Version: "v1alpha1", Resource: "instances"}
)

// instancesOf is the instances resource under identity.
func instancesOf(identity string) schema.GroupVersionResource {
	gvr := instancesGVR
	gvr.Resource += ":" + identity
	return gvr
}

// cachedResource is a CachedResource (kind CachedResource for kcp v0.32,
// ClusterCachedResource for kcp main) for instances, as kcp's shard pushes
// it once its controller has set the identity and the kind and scope
// annotations.
func cachedResource(gvr schema.GroupVersionResource, kind, name, identity string) *unstructured.Unstructured {
	cr := newObject(gvr, kind, "", name, map[string]interface{}{
		"group": instancesGVR.Group, "version": instancesGVR.Version, "resource": instancesGVR.Resource,
	})
	cr.SetAnnotations(map[string]string{"cache.kcp.io/resource-kind": "Instance", "cache.kcp.io/resource-scope": "Cluster"})
	cr.Object["status"] = map[string]interface{}{"identityHash": identity}
	return cr
}

// instance is a copy as kcp's CachedResource replication pushes it.
func instance(name, spec string) *unstructured.Unstructured {
	u := newObject(instancesGVR, "Instance", "", name, map[string]interface{}{"v": spec})
	u.SetLabels(map[string]string{"app.kubernetes.io/part-of": "instances"})
	u.SetAnnotations(map[string]string{"cache.kcp.io/original-resource-version": spec})
	return u
}

// pushInstance writes a copy under identity into shard/cluster, once the
// identity is served.
func pushInstance(t *testing.T, srv *cachetest.Server, shard, cluster, identity string, obj *unstructured.Unstructured) *unstructured.Unstructured {
	t.Helper()
	var created *unstructured.Unstructured
	cachetest.Eventually(t, fmt.Sprintf("%s created under identity %s in %s/%s", obj.GetName(), identity, shard, cluster), func(ctx context.Context) error {
		var err error
		created, err = dyn(t, srv, shard, cluster).Resource(instancesOf(identity)).Create(ctx, obj, metav1.CreateOptions{})
		return err
	})
	return created
}

// partialMetadataConfig makes a dynamic client ask for metadata only, as
// kcp's metadata client does (its pkg/metadata): every list Accepts
// PartialObjectMetadataList, every watch PartialObjectMetadata.
func partialMetadataConfig(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return cachetest.RoundTripperFunc(func(req *http.Request) (*http.Response, error) {
			as := "PartialObjectMetadataList"
			if req.URL.Query().Get("watch") == "true" {
				as = "PartialObjectMetadata"
			}
			req = req.Clone(req.Context())
			req.Header.Set("Accept", "application/json;as="+as+";g=meta.k8s.io;v=v1")
			return rt.RoundTrip(req)
		})
	})
	return c
}

func partialMetadataClient(t *testing.T, srv *cachetest.Server, shard, cluster string) *dynamic.DynamicClient {
	t.Helper()
	return cachetest.Dynamic(t, partialMetadataConfig(srv.Config()), kcpcache.ScopedPathPrefix(kcpcache.Scope{Shard: shard, Cluster: cluster}))
}

func TestPublishedResourcesAreReadWithoutIdentity(t *testing.T) {
	t.Parallel()
	srv := cachetest.StartServer(t)
	ctx := testContext(t)

	// Two workspaces share identity a (one on a kcp v0.32 shard, one on a
	// kcp main shard, which pushes ClusterCachedResources); one has b.
	for _, p := range []struct {
		shard, cluster string
		gvr            schema.GroupVersionResource
		kind, identity string
	}{
		{"alpha", "ws-a1", cachedResourcesGVR, "CachedResource", "ida"},
		{"alpha", "ws-b1", cachedResourcesGVR, "CachedResource", "idb"},
		{"beta", "ws-a2", clusterCachedResourcesGVR, "ClusterCachedResource", "ida"},
	} {
		if _, err := dyn(t, srv, p.shard, p.cluster).Resource(p.gvr).Create(ctx, cachedResource(p.gvr, p.kind, "instances", p.identity), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pushInstance(t, srv, "alpha", "ws-a1", "ida", instance("web-1", "1"))
	pushInstance(t, srv, "alpha", "ws-a1", "ida", instance("web-2", "1"))
	pushInstance(t, srv, "beta", "ws-a2", "ida", instance("web-1", "1"))
	b1 := pushInstance(t, srv, "alpha", "ws-b1", "idb", instance("web-1", "1"))

	// A wildcard list of metadata only, without identity, reads both
	// identities (kcp's CachedResource replication's global informer).
	everything := partialMetadataClient(t, srv, "*", "*").Resource(instancesGVR)
	cachetest.Eventually(t, "the identity-less wildcard list has every identity's objects", func(ctx context.Context) error {
		list, err := everything.List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		got := partitionsOf(list.Items)
		want := []string{"alpha/ws-a1/web-1", "alpha/ws-a1/web-2", "alpha/ws-b1/web-1", "beta/ws-a2/web-1"}
		if !slices.Equal(got, want) || list.GetKind() != "PartialObjectMetadataList" || list.Items[0].Object["spec"] != nil {
			return fmt.Errorf("list %s of %v; want a PartialObjectMetadataList (no spec) of %v", list.GetKind(), got, want)
		}
		return nil
	})

	// An informer over it follows changes of every identity, including an
	// identity published after it started.
	store, synced := startReflector(ctx, everything, "instances")
	cachetest.Eventually(t, "the identity-less informer synced", func(context.Context) error {
		if !synced() || len(store.ListKeys()) != 4 {
			return fmt.Errorf("synced %t, keys %v", synced(), store.ListKeys())
		}
		return nil
	})
	if _, err := dyn(t, srv, "beta", "ws-c1").Resource(clusterCachedResourcesGVR).Create(ctx, cachedResource(clusterCachedResourcesGVR, "ClusterCachedResource", "instances", "idc"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pushInstance(t, srv, "beta", "ws-c1", "idc", instance("db-1", "1"))
	b1.Object["spec"] = map[string]interface{}{"v": "2"}
	b1.SetAnnotations(map[string]string{"cache.kcp.io/original-resource-version": "2"})
	if _, err := dyn(t, srv, "alpha", "ws-b1").Resource(instancesOf("idb")).Update(ctx, b1, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := dyn(t, srv, "alpha", "ws-a1").Resource(instancesOf("ida")).Delete(ctx, "web-2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	cachetest.Eventually(t, "the informer saw the new identity, the update and the deletion", func(context.Context) error {
		keys := store.ListKeys()
		slices.Sort(keys)
		if want := []string{"ws-a1|/web-1", "ws-a2|/web-1", "ws-b1|/web-1", "ws-c1|/db-1"}; !slices.Equal(keys, want) {
			return fmt.Errorf("keys %v, want %v", keys, want)
		}
		obj, _, _ := store.GetByKey("ws-b1|/web-1")
		if v := obj.(*unstructured.Unstructured).GetAnnotations()["cache.kcp.io/original-resource-version"]; v != "2" {
			return fmt.Errorf("ws-b1 web-1 has original-resource-version %q, want 2", v)
		}
		return nil
	})

	// A watch with a label selector sees an object leave and re-enter it,
	// as upstream's etcd watch reports it.
	labelled, err := dyn(t, srv, "*", "*").Resource(instancesGVR).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/part-of=instances"})
	if err != nil {
		t.Fatal(err)
	}
	w, err := dyn(t, srv, "*", "ws-b1").Resource(instancesGVR).Watch(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/part-of=instances", ResourceVersion: labelled.GetResourceVersion()})
	if err != nil {
		t.Fatal(err)
	}
	b1client := dyn(t, srv, "alpha", "ws-b1").Resource(instancesOf("idb"))
	for _, step := range []struct {
		label string
		want  watch.EventType
	}{{"other", watch.Deleted}, {"instances", watch.Added}} {
		cur, err := b1client.Get(ctx, "web-1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cur.SetLabels(map[string]string{"app.kubernetes.io/part-of": step.label})
		if _, err := b1client.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		if ev := <-w.ResultChan(); ev.Type != step.want || ev.Object.(*unstructured.Unstructured).GetName() != "web-1" {
			t.Errorf("relabelled to %s: %s %v, want %s of web-1", step.label, ev.Type, ev.Object, step.want)
		}
	}
	w.Stop()

	// Whole objects too, in a shard's wildcard scope.
	list, err := dyn(t, srv, "alpha", "*").Resource(instancesGVR).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/part-of=instances"})
	if err != nil || !slices.Equal(partitionsOf(list.Items), []string{"alpha/ws-a1/web-1", "alpha/ws-b1/web-1"}) || list.Items[0].GetKind() != "Instance" {
		t.Errorf("alpha/* instances = %v, %v; want the two Instances of shard alpha", list, err)
	}

	// A read by name in one cluster resolves the identity through the
	// cluster's CachedResource (kcp's e2e test GETs so), for either kind.
	for _, p := range []struct{ shard, cluster, spec string }{{"alpha", "ws-b1", "2"}, {"beta", "ws-a2", "1"}} {
		got, err := dyn(t, srv, p.shard, p.cluster).Resource(instancesGVR).Get(ctx, "web-1", metav1.GetOptions{})
		if err != nil || got.Object["spec"].(map[string]interface{})["v"] != p.spec {
			t.Errorf("GET %s/%s instances web-1 = %v, %v; want spec.v=%s", p.shard, p.cluster, got, err, p.spec)
		}
	}
	if _, err := dyn(t, srv, "alpha", "ws-b1").Resource(instancesGVR).Get(ctx, "nope", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("GET of an absent name: %v, want NotFound", err)
	}
	// A cluster without a CachedResource of its own: a copy stored there
	// under a published identity is still found, never reported absent.
	pushInstance(t, srv, "alpha", "ws-z", "idb", instance("stray", "1"))
	if _, err := dyn(t, srv, "alpha", "ws-z").Resource(instancesGVR).Get(ctx, "stray", metav1.GetOptions{}); err != nil {
		t.Errorf("GET in a cluster without a CachedResource: %v", err)
	}

	// Read-only; an unpublished version is not served.
	_, err = dyn(t, srv, "alpha", "ws-b1").Resource(instancesGVR).Create(ctx, instance("web-9", "1"), metav1.CreateOptions{})
	if status, ok := err.(apierrors.APIStatus); !ok || status.Status().Code != http.StatusMethodNotAllowed {
		t.Errorf("create without identity: %v, want 405", err)
	}
	if keys := srv.EtcdKeys(t, "/machines.svm.io/instances/"); len(keys) != 0 {
		t.Errorf("a write without identity stored %v", keys)
	}
	v9 := instancesGVR
	v9.Version = "v9"
	if _, err := dyn(t, srv, "*", "*").Resource(v9).List(ctx, metav1.ListOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("an unpublished version: %v, want 404", err)
	}

	// After a restart the first reads find the published objects: until
	// the server has served what the cached CachedResources declare, it
	// answers 503 (client-go retries), never 404.
	srv.RestartServer(t)
	if _, err := dyn(t, srv, "alpha", "ws-b1").Resource(instancesGVR).Get(ctx, "web-1", metav1.GetOptions{}); err != nil {
		t.Errorf("GET without identity right after a restart: %v", err)
	}
	if list, err := everything.List(ctx, metav1.ListOptions{}); err != nil || len(list.Items) != 5 {
		t.Errorf("list without identity right after a restart: %d items, %v; want 5", len(list.Items), err)
	}

	// Once no CachedResource publishes it, it is not served without
	// identity.
	for _, p := range []struct {
		shard, cluster string
		gvr            schema.GroupVersionResource
	}{{"alpha", "ws-a1", cachedResourcesGVR}, {"alpha", "ws-b1", cachedResourcesGVR}, {"beta", "ws-a2", clusterCachedResourcesGVR}, {"beta", "ws-c1", clusterCachedResourcesGVR}} {
		if err := dyn(t, srv, p.shard, p.cluster).Resource(p.gvr).Delete(ctx, "instances", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	cachetest.Eventually(t, "instances no longer served without identity", func(ctx context.Context) error {
		if _, err := everything.List(ctx, metav1.ListOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("list: %v, want 404", err)
		}
		return nil
	})
}

// A client that resumes an identity-less watch from the resourceVersion of
// the last event it received misses nothing, whichever identity the events
// were of: one stream in revision order, not one per identity.
func TestPublishedResourceWatchResumesWithoutLoss(t *testing.T) {
	t.Parallel()
	srv := cachetest.StartServer(t)
	ctx := testContext(t)
	identities := []string{"id1", "id2", "id3"}
	for i, id := range identities {
		cluster := "ws-" + strconv.Itoa(i)
		if _, err := dyn(t, srv, "alpha", cluster).Resource(cachedResourcesGVR).Create(ctx, cachedResource(cachedResourcesGVR, "CachedResource", "instances", id), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		pushInstance(t, srv, "alpha", cluster, id, instance("first", "0"))
	}
	everything := partialMetadataClient(t, srv, "*", "*").Resource(instancesGVR)
	var start string
	cachetest.Eventually(t, "the three identities listed", func(ctx context.Context) error {
		list, err := everything.List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		if len(list.Items) != 3 {
			return fmt.Errorf("%d items", len(list.Items))
		}
		start = list.GetResourceVersion()
		return nil
	})

	// Writes that alternate between the identities, from three writers at
	// once.
	const perIdentity = 20
	errs := make(chan error, len(identities))
	for i, id := range identities {
		client := dyn(t, srv, "alpha", "ws-"+strconv.Itoa(i)).Resource(instancesOf(id))
		go func() {
			for n := range perIdentity {
				if _, err := client.Create(ctx, instance("obj-"+strconv.Itoa(n), "1"), metav1.CreateOptions{}); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range identities {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}

	// Watch from the list, stop after a third of the events, resume from
	// the last one seen, and so on: every write arrives, in revision order.
	seen := map[string]bool{}
	rv := start
	var last int64
	for round := 0; len(seen) < perIdentity*len(identities); round++ {
		if round > 10 {
			t.Fatalf("after %d rounds saw %d of %d creations", round, len(seen), perIdentity*len(identities))
		}
		// A deadline per round, so that a lost event fails the test soon.
		roundCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		w, err := everything.Watch(roundCtx, metav1.ListOptions{ResourceVersion: rv})
		if err != nil {
			t.Fatal(err)
		}
		for n := 0; n < perIdentity; n++ {
			ev, ok := <-w.ResultChan()
			if !ok || ev.Type != watch.Added {
				t.Fatalf("event %v (open %t), want ADDED", ev, ok)
			}
			u := ev.Object.(*unstructured.Unstructured)
			got, _ := strconv.ParseInt(u.GetResourceVersion(), 10, 64)
			if got <= last {
				t.Fatalf("resourceVersion %d after %d: events out of revision order", got, last)
			}
			last, rv = got, u.GetResourceVersion()
			seen[u.GetAnnotations()[kcpcache.AnnotationCluster]+"/"+u.GetName()] = true
			if len(seen) == perIdentity*len(identities) {
				break
			}
		}
		w.Stop()
		cancel()
	}
}
