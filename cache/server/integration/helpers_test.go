package integration_test

import (
	"bytes"
	"context"
	"encoding/json"
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

// dynBookkeeping is dyn for a reader that asks for the copies' bookkeeping
// (kcpcache.CopyBookkeepingHeader): where each copy came from.
func dynBookkeeping(t *testing.T, srv *cachetest.Server, shard, cluster string) *dynamic.DynamicClient {
	t.Helper()
	cfg := srv.ScopedConfig(shard, cluster)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			req = req.Clone(req.Context())
			req.Header.Set(kcpcache.CopyBookkeepingHeader, "keep")
			return rt.RoundTrip(req)
		})
	})
	c, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// objectDiffButResourceVersion says how a and b differ, their
// resourceVersions aside: "" when they are equal. Both are encoded as JSON
// (maps in key order), so the comparison is byte for byte of the encoding.
func objectDiffButResourceVersion(a, b *unstructured.Unstructured) string {
	enc := func(u *unstructured.Unstructured) string {
		c := u.DeepCopy()
		c.SetResourceVersion("")
		out, err := json.Marshal(c.Object)
		if err != nil {
			return err.Error()
		}
		return string(out)
	}
	if ea, eb := enc(a), enc(b); ea != eb {
		return fmt.Sprintf("\n%s\n%s", ea, eb)
	}
	return ""
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

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
