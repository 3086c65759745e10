package integration_test

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
)

var partitions = [][2]string{{"amber", "root"}, {"amber", "org1"}, {"blue", "root"}, {"blue", "org1"}}

// populate writes same-named objects into every partition: an APIExport
// "shared" (plus "only-amber" in amber/root), and Widgets "w" in namespaces
// "default" and "other".
func populate(t *testing.T, srv *cachetest.Server) schema.GroupVersionResource {
	t.Helper()
	ctx := testContext(t)
	widgets := srv.InstallCRD(t, cachetest.WidgetNames)
	for _, p := range partitions {
		c := dyn(t, srv, p[0], p[1])
		marker := map[string]interface{}{"partition": p[0] + "/" + p[1]}
		if _, err := c.Resource(apiExports).Create(ctx, apiExport("shared", marker), metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating in %v: %v", p, err)
		}
		for _, ns := range []string{"default", "other"} {
			if _, err := c.Resource(widgets).Namespace(ns).Create(ctx, newObject(widgets, "Widget", ns, "w", marker), metav1.CreateOptions{}); err != nil {
				t.Fatalf("creating widget in %v/%s: %v", p, ns, err)
			}
		}
	}
	if _, err := dyn(t, srv, "amber", "root").Resource(apiExports).Create(ctx, apiExport("only-amber", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return widgets
}

func TestSameNamesInEveryScopeShape(t *testing.T) {
	t.Parallel()
	srv := cachetest.StartServer(t)
	widgets := populate(t, srv)
	ctx := testContext(t)

	t.Run("cluster-scoped", func(t *testing.T) {
		tests := []struct {
			shard, cluster string
			want           []string
		}{
			{"amber", "root", []string{"amber/root/only-amber", "amber/root/shared"}},
			{"blue", "org1", []string{"blue/org1/shared"}},
			{"amber", "*", []string{"amber/org1/shared", "amber/root/only-amber", "amber/root/shared"}},
			{"*", "root", []string{"amber/root/only-amber", "amber/root/shared", "blue/root/shared"}},
			{"*", "*", []string{"amber/org1/shared", "amber/root/only-amber", "amber/root/shared", "blue/org1/shared", "blue/root/shared"}},
			{"green", "*", []string{}},
			{"*", "org2", []string{}},
		}
		for _, tt := range tests {
			list, err := dyn(t, srv, tt.shard, tt.cluster).Resource(apiExports).List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatalf("%s/%s: %v", tt.shard, tt.cluster, err)
			}
			if got := partitionsOf(list.Items); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("list %s/%s = %v, want %v", tt.shard, tt.cluster, got, tt.want)
			}
		}
	})

	t.Run("namespaced", func(t *testing.T) {
		tests := []struct {
			shard, cluster, namespace string
			want                      []string
		}{
			{"amber", "root", "", []string{"amber/root/default/w", "amber/root/other/w"}},
			{"amber", "root", "default", []string{"amber/root/default/w"}},
			{"amber", "*", "other", []string{"amber/org1/other/w", "amber/root/other/w"}},
			{"*", "org1", "default", []string{"amber/org1/default/w", "blue/org1/default/w"}},
			{"*", "*", "default", []string{"amber/org1/default/w", "amber/root/default/w", "blue/org1/default/w", "blue/root/default/w"}},
			{"*", "*", "missing", []string{}},
		}
		for _, tt := range tests {
			list, err := dyn(t, srv, tt.shard, tt.cluster).Resource(widgets).Namespace(tt.namespace).List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatalf("%s/%s ns %q: %v", tt.shard, tt.cluster, tt.namespace, err)
			}
			if got := partitionsOf(list.Items); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("list %s/%s ns %q = %v, want %v", tt.shard, tt.cluster, tt.namespace, got, tt.want)
			}
		}
		all, err := dyn(t, srv, "*", "*").Resource(widgets).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(all.Items) != 8 {
			t.Errorf("*/* across namespaces has %d widgets, want 8", len(all.Items))
		}
	})

	t.Run("get by name reads its own partition", func(t *testing.T) {
		for _, p := range partitions {
			got, err := dyn(t, srv, p[0], p[1]).Resource(apiExports).Get(ctx, "shared", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if marker, _, _ := unstructured.NestedString(got.Object, "spec", "partition"); marker != p[0]+"/"+p[1] {
				t.Errorf("GET in %v returned the object of %q", p, marker)
			}
		}
		if _, err := dyn(t, srv, "blue", "root").Resource(apiExports).Get(ctx, "only-amber", metav1.GetOptions{}); err == nil {
			t.Error("an object of amber/root must not be visible in blue/root")
		}
	})

	t.Run("label and field selectors through wildcards", func(t *testing.T) {
		obj, err := dyn(t, srv, "blue", "org1").Resource(apiExports).Get(ctx, "shared", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		obj.SetLabels(map[string]string{"tier": "gold"})
		if _, err := dyn(t, srv, "blue", "org1").Resource(apiExports).Update(ctx, obj, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		for _, scope := range [][2]string{{"*", "*"}, {"*", "org1"}, {"blue", "*"}} {
			list, err := dyn(t, srv, scope[0], scope[1]).Resource(apiExports).List(ctx, metav1.ListOptions{LabelSelector: "tier=gold"})
			if err != nil {
				t.Fatal(err)
			}
			if got := partitionsOf(list.Items); !reflect.DeepEqual(got, []string{"blue/org1/shared"}) {
				t.Errorf("label selector in %v = %v", scope, got)
			}
		}
		list, err := dyn(t, srv, "*", "root").Resource(apiExports).List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=shared"})
		if err != nil {
			t.Fatal(err)
		}
		if got := partitionsOf(list.Items); !reflect.DeepEqual(got, []string{"amber/root/shared", "blue/root/shared"}) {
			t.Errorf("field selector in */root = %v", got)
		}
	})

	t.Run("paging through a wildcard", func(t *testing.T) {
		var seen []unstructured.Unstructured
		opts := metav1.ListOptions{Limit: 2}
		pages := 0
		for {
			page, err := dyn(t, srv, "*", "*").Resource(apiExports).List(ctx, opts)
			if err != nil {
				t.Fatal(err)
			}
			pages++
			seen = append(seen, page.Items...)
			if page.GetContinue() == "" {
				break
			}
			opts.Continue = page.GetContinue()
		}
		if pages != 3 || len(seen) != 5 {
			t.Errorf("paged %d objects in %d pages, want 5 in 3", len(seen), pages)
		}
		if got := partitionsOf(seen); len(got) != 5 || strings.Join(got, ",") != "amber/org1/shared,amber/root/only-amber,amber/root/shared,blue/org1/shared,blue/root/shared" {
			t.Errorf("paged objects = %v", got)
		}
	})

	t.Run("etcd keys carry shard and cluster", func(t *testing.T) {
		keys := srv.EtcdKeys(t, "/apis.kcp.io/apiexports/")
		want := []string{}
		for _, p := range [][2]string{{"amber", "org1"}, {"amber", "root"}, {"blue", "org1"}, {"blue", "root"}} {
			want = append(want, fmt.Sprintf("%s/apis.kcp.io/apiexports/%s/%s/shared", srv.EtcdPrefix(), p[0], p[1]))
		}
		want = append(want[:2], append([]string{srv.EtcdPrefix() + "/apis.kcp.io/apiexports/amber/root/only-amber"}, want[2:]...)...)
		if !reflect.DeepEqual(keys, sortedCopy(want)) {
			t.Errorf("etcd keys = %v\nwant %v", keys, sortedCopy(want))
		}
		wkeys := srv.EtcdKeys(t, "/example.dev/widgets/amber/root/")
		wantW := []string{srv.EtcdPrefix() + "/example.dev/widgets/amber/root/default/w", srv.EtcdPrefix() + "/example.dev/widgets/amber/root/other/w"}
		if !reflect.DeepEqual(wkeys, wantW) {
			t.Errorf("widget keys = %v, want %v", wkeys, wantW)
		}
	})
}
