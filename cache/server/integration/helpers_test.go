package integration_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
)

var (
	apiExports        = schema.GroupVersionResource{Group: "apis.kcp.io", Version: "v1alpha1", Resource: "apiexports"}
	apiResourceSchema = schema.GroupVersionResource{Group: "apis.kcp.io", Version: "v1alpha1", Resource: "apiresourceschemas"}
)

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// dyn is a dynamic client for one scope of srv.
func dyn(t *testing.T, srv *cachetest.Server, shard, cluster string) *dynamic.DynamicClient {
	t.Helper()
	c, err := dynamic.NewForConfig(srv.ScopedConfig(shard, cluster))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func newObject(gvr schema.GroupVersionResource, kind, namespace, name string, spec map[string]interface{}) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": gvr.GroupVersion().String(),
		"kind":       kind,
		"metadata":   map[string]interface{}{"name": name},
	}}
	if namespace != "" {
		u.SetNamespace(namespace)
	}
	if spec != nil {
		u.Object["spec"] = spec
	}
	return u
}

func apiExport(name string, spec map[string]interface{}) *unstructured.Unstructured {
	return newObject(apiExports, "APIExport", "", name, spec)
}

// partitionOf renders an object's partition and name for comparisons.
func partitionOf(u unstructured.Unstructured) string {
	a := u.GetAnnotations()
	p := a[kcpcache.AnnotationShard] + "/" + a[kcpcache.AnnotationCluster] + "/"
	if ns := u.GetNamespace(); ns != "" {
		p += ns + "/"
	}
	return p + u.GetName()
}

func partitionsOf(items []unstructured.Unstructured) []string {
	out := make([]string, 0, len(items))
	for _, u := range items {
		out = append(out, partitionOf(u))
	}
	sort.Strings(out)
	return out
}

func sortedCopy(in []string) []string {
	out := append([]string(nil), in...)
	sort.Strings(out)
	return out
}

func errorf(format string, args ...interface{}) error { return fmt.Errorf(format, args...) }

func newRequest(ctx context.Context, method, url string, body []byte) (*http.Request, error) {
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	return http.NewRequestWithContext(ctx, method, url, r)
}
