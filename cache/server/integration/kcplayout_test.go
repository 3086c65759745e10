package integration_test

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
	"github.com/kcp-cache/kcp-cache/cache/server/kcplayout"
)

// kcpFixture is testdata/kcp-v0.32.3-cache-server-etcd.json: keys and
// values kcp's cache-server wrote into its etcd.
type kcpFixture struct {
	Prefix string `json:"prefix"`
	KVs    []struct {
		Key   string `json:"key"`
		Value string `json:"value"`
	} `json:"kvs"`
}

// kcpObject is where an object of the fixture must be served, and its uid.
type kcpObject struct {
	gvr                    schema.GroupVersionResource
	shard, cluster, ns, nm string
}

const (
	widgetsIdentity    = "2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881"
	configMapsIdentity = "d1e6e9f24df974e4c75706d8dd4728911b230bb7162cdfe2689ef4b487263835"
)

// kcpObjects are the fixture's objects, as a kcp shard reads them back.
var kcpObjects = []kcpObject{
	{gvr("apis.kcp.io", "v1alpha2", "apiexports"), "root", "root", "", "tenancy.kcp.io"},
	{gvr("apis.kcp.io", "v1alpha2", "apiexports"), "shard-1", "11meply14zsdytvi", "", "export-1"},
	{gvr("apis.kcp.io", "v1alpha1", "apiresourceschemas"), "root", "root", "", "v260302-ae9fdd9c1.shards.core.kcp.io"},
	{gvr("apis.kcp.io", "v1alpha1", "apiexportendpointslices"), "root", "root", "", "shards.core.kcp.io"},
	{gvr("core.kcp.io", "v1alpha1", "logicalclusters"), "root", "root", "", "cluster"},
	{gvr("core.kcp.io", "v1alpha1", "shards"), "root", "root", "", "shard-1"},
	{gvr("tenancy.kcp.io", "v1alpha1", "workspacetypes"), "root", "root", "", "universal"},
	{gvr("rbac.authorization.k8s.io", "v1", "clusterroles"), "root", "root", "", "system:kcp:apiexport:tenancy:bind"},
	{gvr("rbac.authorization.k8s.io", "v1", "clusterrolebindings"), "root", "root", "", "system:kcp:authenticated:apiexport:tenancy:bind"},
	{gvr("rbac.authorization.k8s.io", "v1", "roles"), "root", "root", "default", "r1"},
	{gvr("apis.kcp.io", "v1alpha2", "apiexports"), "shard-1", "2abc", "", "three"},
	{gvr("cache.kcp.io", "v1alpha1", "cachedresources"), "root", "root", "", "widgets"},
	{gvr("example.io", "v1", "widgets:"+widgetsIdentity), "root", "root", "default", "w1"},
	{gvr("cache.kcp.io", "v1alpha1", "cachedresources"), "root", "root", "", "configmaps"},
	{gvr("", "v1", "configmaps:"+configMapsIdentity), "root", "root", "default", "c1"},
}

func gvr(group, version, resource string) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: group, Version: version, Resource: resource}
}

// A server started on the etcd data kcp v0.32.3's cache-server left (its
// key layout, objects and a CRD without the partition annotations) moves
// it into its own layout before it builds its storage: it becomes ready
// and serves every object in its partition, with its uid and both
// annotations. Keys in neither layout stay as they were. Started again, it
// finds nothing to move and writes nothing.
func TestStartsOnTheDataOfKcpsCacheServer(t *testing.T) {
	t.Parallel()
	srv := cachetest.StartServer(t)
	ctx := testContext(t)
	data, err := os.ReadFile("testdata/kcp-v0.32.3-cache-server-etcd.json")
	if err != nil {
		t.Fatal(err)
	}
	var fixture kcpFixture
	if err := json.Unmarshal(data, &fixture); err != nil {
		t.Fatal(err)
	}
	if len(fixture.KVs) != len(kcpObjects)+1 {
		t.Fatalf("the fixture holds %d keys; the test knows %d objects and a CRD", len(fixture.KVs), len(kcpObjects))
	}

	// kcp's cache-server ran on this etcd: its keys, its CRD of ClusterRoles
	// in place of ours, and two keys in neither layout.
	if err := srv.Halt(); err != nil {
		t.Fatal(err)
	}
	etcd, prefix := srv.EtcdClient(), srv.EtcdPrefix()
	uids := map[string]string{}
	for i, kv := range fixture.KVs {
		key := prefix + strings.TrimPrefix(kv.Key, fixture.Prefix)
		if _, err := etcd.Put(ctx, key, kv.Value); err != nil {
			t.Fatal(err)
		}
		if i < len(kcpObjects) {
			var obj metav1.PartialObjectMetadata
			if err := json.Unmarshal([]byte(kv.Value), &obj); err != nil {
				t.Fatal(err)
			}
			uids[kcpObjects[i].nm] = string(obj.UID)
		}
	}
	neither := map[string]string{
		prefix + "/apis.kcp.io/apiexports/customresources/root":              "{}",
		prefix + "/apis.kcp.io/apiexports/customresources/root/root/renamed": `{"metadata":{"name":"other"}}`,
	}
	for k, v := range neither {
		if _, err := etcd.Put(ctx, k, v); err != nil {
			t.Fatal(err)
		}
	}

	// Ready (Resume waits for /readyz), and every object served.
	if err := srv.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	assertServed := func() {
		t.Helper()
		for _, o := range kcpObjects {
			// The identity types appear once the CachedResources that
			// publish them are read.
			cachetest.Eventually(t, o.gvr.Resource+" "+o.nm+" served", func(ctx context.Context) error {
				got, err := dyn(t, srv, o.shard, o.cluster).Resource(o.gvr).Namespace(o.ns).Get(ctx, o.nm, metav1.GetOptions{})
				if err != nil {
					return err
				}
				a := got.GetAnnotations()
				if string(got.GetUID()) != uids[o.nm] || a[kcpcache.AnnotationShard] != o.shard || a[kcpcache.AnnotationCluster] != o.cluster {
					t.Errorf("%s %s: uid %s, annotations %v; want uid %s in %s/%s", o.gvr.Resource, o.nm, got.GetUID(), a, uids[o.nm], o.shard, o.cluster)
				}
				return nil
			})
		}
		// A shard's wildcard informer sees each export once, in its
		// partition. (Built with -tags kcp, kcp's fork also lists the key
		// in neither layout, with a partition it reads from the key.)
		list, err := dyn(t, srv, "*", "*").Resource(gvr("apis.kcp.io", "v1alpha2", "apiexports")).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]int{}
		for _, item := range list.Items {
			a := item.GetAnnotations()
			seen[a[kcpcache.AnnotationShard]+"/"+a[kcpcache.AnnotationCluster]+"/"+item.GetName()]++
		}
		for _, o := range kcpObjects {
			if o.gvr.Resource == "apiexports" && seen[o.shard+"/"+o.cluster+"/"+o.nm] != 1 {
				t.Errorf("*/* apiexports holds %s/%s/%s %d times, want once (all: %v)", o.shard, o.cluster, o.nm, seen[o.shard+"/"+o.cluster+"/"+o.nm], seen)
			}
		}
	}
	assertServed()

	// Nothing in kcp's layout is left; keys in neither layout are untouched.
	revisions := func() map[string]int64 {
		t.Helper()
		resp, err := etcd.Get(ctx, prefix+"/", clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]int64{}
		for _, kv := range resp.Kvs {
			key := string(kv.Key)
			switch layout := kcplayout.Classify(prefix, key, kv.Value); {
			case layout == kcplayout.LayoutKCP:
				t.Errorf("%s is still in kcp's layout", key)
			case neither[key] != "" && string(kv.Value) != neither[key]:
				t.Errorf("%s, in neither layout, was changed to %s", key, kv.Value)
			case layout == kcplayout.LayoutOurs:
				out[key] = kv.ModRevision
			}
		}
		for k := range neither {
			if _, err := etcd.Get(ctx, k); err != nil {
				t.Error(err)
			}
		}
		return out
	}
	before := revisions()
	if len(before) < len(kcpObjects) {
		t.Errorf("%d objects in this server's layout, want at least the fixture's %d", len(before), len(kcpObjects))
	}

	// Again: the same objects, none written again.
	srv.RestartServer(t)
	assertServed()
	after := revisions()
	for key, rev := range before {
		if after[key] != rev {
			t.Errorf("%s: revision %d before the restart, %d after", key, rev, after[key])
		}
	}
}
