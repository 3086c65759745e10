package integration_test

import (
	"io"
	"mime"
	"net/http"
	"reflect"
	"sort"
	"sync"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"
	genericfeatures "k8s.io/apiserver/pkg/features"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/dynamic"
	clientfeatures "k8s.io/client-go/features"
	clientfeaturestesting "k8s.io/client-go/features/testing"
	"k8s.io/client-go/rest"
	featuregatetesting "k8s.io/component-base/featuregate/testing"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
)

// contentTypes records the media types of the responses a client got.
type contentTypes struct {
	mu   sync.Mutex
	seen map[string]int
}

func (c *contentTypes) got() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for mt := range c.seen {
		out = append(out, mt)
	}
	sort.Strings(out)
	return out
}

// recordingDyn is dyn that records the Content-Type of every response. A
// client built while ClientsAllowCBOR is on asks for CBOR first (q=1) and
// takes JSON (q=0.9) from a server that does not serve CBOR.
func recordingDyn(t *testing.T, srv *cachetest.Server, shard, cluster string) (*dynamic.DynamicClient, *contentTypes) {
	t.Helper()
	ct := &contentTypes{seen: map[string]int{}}
	cfg := srv.ScopedConfig(shard, cluster)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(req)
			if err == nil {
				ct.mu.Lock()
				ct.seen[resp.Header.Get("Content-Type")]++
				ct.mu.Unlock()
			}
			return resp, err
		})
	})
	c, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c, ct
}

// cborObjects are objects whose spec exercises the transcoding: numbers of
// each kind, text beyond ASCII, nesting, and more than 23 members.
func cborObjects() []*unstructured.Unstructured {
	many := map[string]interface{}{}
	for _, k := range []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n", "o", "p", "q", "r", "s", "t", "u", "v", "w", "x", "y", "z"} {
		many[k] = int64(len(k))
	}
	return []*unstructured.Unstructured{
		apiExport("numbers", map[string]interface{}{"int": int64(-7), "big": int64(1) << 40, "float": 1.5, "null": nil, "yes": true}),
		apiExport("text", map[string]interface{}{"s": "é — 😀 \"quoted\" \\ \n", "list": []interface{}{"a", int64(1), map[string]interface{}{"deep": []interface{}{}}}}),
		apiExport("wide", many),
	}
}

// TestCBORReadersGetWhatJSONReadersGet runs with upstream's gate
// CBORServingAndStorage on: a client-go dynamic client that allows CBOR
// lists and watches in CBOR and gets the same objects and events as one
// that reads JSON, which stays the default; a CBOR body is refused with 415.
// Not parallel: feature gates are the process's.
func TestCBORReadersGetWhatJSONReadersGet(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, genericfeatures.CBORServingAndStorage, true)
	srv := cachetest.StartServer(t)
	ctx := testContext(t)

	for _, p := range partitions {
		for _, o := range cborObjects() {
			if _, err := dyn(t, srv, p[0], p[1]).Resource(apiExports).Create(ctx, o, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}

	jsonClient, jsonTypes := recordingDyn(t, srv, "*", "*")
	clientfeaturestesting.SetFeatureDuringTest(t, clientfeatures.ClientsAllowCBOR, true)
	cborClient, cborTypes := recordingDyn(t, srv, "*", "*")

	jl, err := jsonClient.Resource(apiExports).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cl, err := cborClient.Resource(apiExports).List(ctx, metav1.ListOptions{ResourceVersion: jl.GetResourceVersion(), ResourceVersionMatch: metav1.ResourceVersionMatchExact})
	if err != nil {
		t.Fatal(err)
	}
	if want := len(partitions) * len(cborObjects()); len(jl.Items) != want {
		t.Fatalf("JSON list: %d objects, want %d", len(jl.Items), want)
	}
	if !reflect.DeepEqual(jl.Items, cl.Items) {
		t.Errorf("the CBOR list differs from the JSON list:\nCBOR %v\nJSON %v", cl.Items, jl.Items)
	}
	if got := cborTypes.got(); !reflect.DeepEqual(got, []string{"application/cbor"}) {
		t.Errorf("the CBOR client got %v, want application/cbor", got)
	}

	// Watches from the list's resourceVersion see the same events.
	var watches []watch.Interface
	for _, c := range []*dynamic.DynamicClient{jsonClient, cborClient} {
		w, err := c.Resource(apiExports).Watch(ctx, metav1.ListOptions{ResourceVersion: jl.GetResourceVersion()})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		watches = append(watches, w)
	}
	later := apiExport("later", map[string]interface{}{"n": int64(3), "f": 0.25})
	if _, err := dyn(t, srv, "amber", "root").Resource(apiExports).Create(ctx, later, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := dyn(t, srv, "blue", "org1").Resource(apiExports).Delete(ctx, "text", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	je, ce := collect(t, watches[0], 2), collect(t, watches[1], 2)
	for i := range je {
		if je[i].Type != ce[i].Type || !reflect.DeepEqual(je[i].Object, ce[i].Object) {
			t.Errorf("event %d: CBOR %s %v, JSON %s %v", i, ce[i].Type, ce[i].Object, je[i].Type, je[i].Object)
		}
	}
	if got := cborTypes.got(); !reflect.DeepEqual(got, []string{"application/cbor", "application/cbor-seq"}) {
		t.Errorf("the CBOR client got %v, want application/cbor and application/cbor-seq (the watch)", got)
	}
	if got := jsonTypes.got(); !reflect.DeepEqual(got, []string{"application/json"}) {
		t.Errorf("the client that did not ask for CBOR got %v, want application/json only", got)
	}

	// JSON is the default for a client that names no type.
	status, contentType := rawGet(t, srv, "", kcpcache.JoinHostPath(srv.Config().Host, kcpcache.ScopedPath(kcpcache.Scope{Shard: "*", Cluster: "*"}, "/apis/apis.kcp.io/v1alpha1/apiexports")))
	if status != http.StatusOK || contentType != "application/json" {
		t.Errorf("a LIST without Accept: %d %s, want 200 application/json", status, contentType)
	}

	// Metadata-only lists (metadata informers) in CBOR too; a Table only
	// in JSON or YAML (upstream's RequestScope.AllowsMediaTypeTransform),
	// so a CBOR Table is 406, never 500.
	for accept, want := range map[string]int{
		"application/cbor;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io": http.StatusOK,
		"application/cbor;as=Table;v=v1;g=meta.k8s.io":                     http.StatusNotAcceptable,
	} {
		status, contentType := rawGet(t, srv, accept, kcpcache.JoinHostPath(srv.Config().Host, kcpcache.ScopedPath(kcpcache.Scope{Shard: "*", Cluster: "*"}, "/apis/apis.kcp.io/v1alpha1/apiexports")))
		if status != want || (want == http.StatusOK && contentType != "application/cbor") {
			t.Errorf("a LIST with Accept %s: %d %s, want %d", accept, status, contentType, want)
		}
	}

	// A client that prefers CBOR for its bodies is answered 415 and
	// writes JSON from then on (client-go's fallback).
	clientfeaturestesting.SetFeatureDuringTest(t, clientfeatures.ClientsPreferCBOR, true)
	prefers, _ := recordingDyn(t, srv, "amber", "org1")
	body := apiExport("from-cbor-client", map[string]interface{}{"n": int64(1)})
	if _, err := prefers.Resource(apiExports).Create(ctx, body, metav1.CreateOptions{}); err == nil {
		t.Errorf("a CBOR body was accepted; want 415")
	} else if status := apiStatus(err); status != http.StatusUnsupportedMediaType {
		t.Errorf("a CBOR body: %v (%d), want 415", err, status)
	}
	got, err := prefers.Resource(apiExports).Create(ctx, body, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("after the 415, client-go should have written JSON: %v", err)
	}
	if got.Object["spec"].(map[string]interface{})["n"] != int64(1) {
		t.Errorf("created from the fallback: %v", got.Object)
	}
}

// TestCBORIsRefusedCleanlyWithoutTheGate: with CBORServingAndStorage off
// (the default), Accept: application/cbor alone is 406, and a client-go
// client that allows CBOR reads JSON.
func TestCBORIsRefusedCleanlyWithoutTheGate(t *testing.T) {
	srv := cachetest.StartServer(t)
	ctx := testContext(t)
	if _, err := dyn(t, srv, "amber", "root").Resource(apiExports).Create(ctx, apiExport("x", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	base := srv.Config().Host
	for _, path := range []string{
		kcpcache.ScopedPath(kcpcache.Scope{Shard: "*", Cluster: "*"}, "/apis/apis.kcp.io/v1alpha1/apiexports"),
		kcpcache.ScopedPath(kcpcache.Scope{Shard: "amber", Cluster: "root"}, "/apis/apis.kcp.io/v1alpha1/apiexports/x"),
		kcpcache.ScopedPath(kcpcache.Scope{Shard: "amber", Cluster: "root"}, "/apis/apis.kcp.io/v1alpha1/apiexports?watch=true"),
	} {
		for _, accept := range []string{"application/cbor", "application/vnd.kubernetes.protobuf", "text/html"} {
			if status, _ := rawGet(t, srv, accept, kcpcache.JoinHostPath(base, path)); status != http.StatusNotAcceptable {
				t.Errorf("GET %s with Accept %s: %d, want 406", path, accept, status)
			}
		}
	}
	clientfeaturestesting.SetFeatureDuringTest(t, clientfeatures.ClientsAllowCBOR, true)
	c, types := recordingDyn(t, srv, "*", "*")
	l, err := c.Resource(apiExports).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Items) != 1 || !reflect.DeepEqual(types.got(), []string{"application/json"}) {
		t.Errorf("a client allowing CBOR got %d objects as %v, want 1 as application/json", len(l.Items), types.got())
	}
}

// rawGet GETs url as the admin with the given Accept header (none when
// empty) and returns the status and the response's media type.
func rawGet(t *testing.T, srv *cachetest.Server, accept, url string) (int, string) {
	t.Helper()
	client, err := rest.HTTPClientFor(srv.Config())
	if err != nil {
		t.Fatal(err)
	}
	req, err := newRequest(testContext(t), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	mediaType, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	return resp.StatusCode, mediaType
}

// apiStatus is the HTTP status of a client-go error, 0 for other errors.
func apiStatus(err error) int32 {
	if s, ok := err.(apierrors.APIStatus); ok {
		return s.Status().Code
	}
	return 0
}
