package integration_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/options"
	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
	"github.com/kcp-cache/kcp-cache/cache/server/mirror"
)

// TestRelayPassesOnACuratedSubset: kcp's example from kcp-dev/kcp#4055, a
// global cache that holds only what the regions promote. zone-a peers
// region (its relay); region peers zone-a and global, and passes on to
// global only APIExports (--pass-on=global=apiexports.apis.kcp.io). Global
// holds zone-a's APIExports and none of its APIResourceSchemas: its reads
// of those answer 503 NotPassedOn, stale or consistent, never an empty
// list; a cache below global (leaf) sees the same subset; region and
// zone-a hold everything.
func TestRelayPassesOnACuratedSubset(t *testing.T) {
	if testing.Short() {
		t.Skip("long scenario (several caches in regions): skipped with -short")
	}
	ctx := testContext(t)
	edges := graphOf([2]string{"zone-a", "region"}, [2]string{"region", "global"}, [2]string{"global", "leaf"})
	peersWith := func(from, to string) bool {
		for _, p := range edges[from] {
			if p == to {
				return true
			}
		}
		return false
	}
	regions := map[string]*region{}
	for name, r := range cachetest.StartRegions(t, ctx, cachetest.RegionsOptions{PeersWith: peersWith, Flags: func(name string, o *options.Options) {
		if name == "region" {
			o.Hierarchy.PassOn = []string{"global=apiexports.apis.kcp.io"}
		}
	}}, "zone-a", "region", "global", "leaf") {
		regions[name] = &region{name: r.Name, srv: r.Srv, opts: r.Opts}
	}
	zone, relay, global, leaf := regions["zone-a"], regions["region"], regions["global"], regions["leaf"]

	shard := "shard-zone-a"
	for i := range 3 {
		if _, err := zone.shard(t, shard).Create(ctx, apiExport(fmt.Sprintf("export-%d", i), nil), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	schemas := dyn(t, zone.srv, shard, "root").Resource(apiResourceSchema)
	if _, err := schemas.Create(ctx, newObject(apiResourceSchema, "APIResourceSchema", "", "schema-0", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// Everything reaches region; the APIExports reach global and leaf.
	for _, r := range []*region{relay, global, leaf} {
		waitItems(t, r, shard, 3, "zone-a")
	}
	readSchemas := func(r *region, resourceVersion string) (int, error) {
		list, err := dyn(t, r.srv, shard, kcpcache.Wildcard).Resource(apiResourceSchema).List(ctx, metav1.ListOptions{ResourceVersion: resourceVersion})
		if err != nil {
			return 0, err
		}
		return len(list.Items), nil
	}
	cachetest.Eventually(t, "region holds zone-a's APIResourceSchema", func(context.Context) error {
		n, err := readSchemas(relay, "")
		if err == nil && n != 1 {
			err = fmt.Errorf("%d schemas, want 1", n)
		}
		return err
	})

	// Global and leaf do not hold the schemas, and say so: 503
	// NotPassedOn naming zone-a, for stale and consistent reads alike.
	for _, r := range []*region{global, leaf} {
		for _, rv := range []string{"", "0"} {
			n, err := readSchemas(r, rv)
			if err == nil {
				t.Fatalf("a read (resourceVersion %q) of zone-a's APIResourceSchemas at %s answered %d objects, want 503 %s", rv, r.name, n, mirror.ReasonNotPassedOn)
			}
			wantStatus(t, fmt.Sprintf("read (resourceVersion %q) of zone-a's APIResourceSchemas at %s", rv, r.name), err, http.StatusServiceUnavailable, mirror.ReasonNotPassedOn, "zone-a")
		}
		list, err := dyn(t, r.srv, kcpcache.Wildcard, kcpcache.Wildcard).Resource(apiResourceSchema).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		if err == nil {
			t.Fatalf("a stale */* read of APIResourceSchemas at %s answered %d objects, want 503 %s", r.name, len(list.Items), mirror.ReasonNotPassedOn)
		}
		wantStatus(t, "stale */* read of APIResourceSchemas at "+r.name, err, http.StatusServiceUnavailable, mirror.ReasonNotPassedOn, "zone-a")
	}
	// Global's own partitions are whole: its own schema is served there.
	if _, err := dyn(t, global.srv, "shard-global", "root").Resource(apiResourceSchema).Create(ctx, newObject(apiResourceSchema, "APIResourceSchema", "", "own", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if list, err := dyn(t, global.srv, "shard-global", kcpcache.Wildcard).Resource(apiResourceSchema).List(ctx, metav1.ListOptions{}); err != nil || len(list.Items) != 1 {
		t.Fatalf("global's own schemas: %v, %v; want 1", list, err)
	}

	// The relay refuses a peer's read of what it does not pass on to it.
	peerCfg := rest.AnonymousClientConfig(relay.srv.Config())
	peerCfg.BearerToken = cachetest.PeerToken("global", "region")
	scoped := rest.CopyConfig(peerCfg)
	scoped.Host = kcpcache.JoinHostPath(scoped.Host, kcpcache.ScopedPathPrefix(kcpcache.Scope{Shard: kcpcache.Wildcard, Cluster: kcpcache.Wildcard}))
	c, err := dynamic.NewForConfig(scoped)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Resource(apiResourceSchema).List(ctx, metav1.ListOptions{})
	wantStatus(t, "global reading APIResourceSchemas at region", err, http.StatusForbidden, "", "")
	if _, err := c.Resource(apiExports).List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatalf("global reading APIExports at region: %v", err)
	}

	// Region's table tells global what it passes on, and offers zone-a's
	// route with that subset.
	ans, err := relay.homesTableWith(ctx, t, peerCfg, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(ans.PassedOn) != 1 || ans.PassedOn[0] != (schema.GroupResource{Group: "apis.kcp.io", Resource: "apiexports"}).String() {
		t.Errorf("region's table for global: passedOn %v, want [apiexports.apis.kcp.io]", ans.PassedOn)
	}
	for _, r := range ans.Routes {
		if r.Home == "zone-a" && (len(r.Resources) != 1 || r.Resources[0] != "apiexports.apis.kcp.io") {
			t.Errorf("region's route to zone-a for global: resources %v, want [apiexports.apis.kcp.io]", r.Resources)
		}
	}
}
