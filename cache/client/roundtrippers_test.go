package client_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/kcp-cache/kcp-cache/cache/client"
)

// recorder is the innermost round tripper: it keeps what reached the wire.
type recorder struct {
	reqs   []*http.Request
	bodies []string
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	r.reqs = append(r.reqs, req)
	body := ""
	if req.Body != nil {
		b, err := io.ReadAll(req.Body)
		if err != nil {
			return nil, err
		}
		_ = req.Body.Close()
		body = string(b)
	}
	r.bodies = append(r.bodies, body)
	return &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(strings.NewReader("{}")), Request: req}, nil
}

func (r *recorder) last(t *testing.T) *http.Request {
	t.Helper()
	if len(r.reqs) == 0 {
		t.Fatal("no request reached the wire")
	}
	return r.reqs[len(r.reqs)-1]
}

type wrapper func(http.RoundTripper) http.RoundTripper

func chain(inner http.RoundTripper, wrappers ...wrapper) http.RoundTripper {
	rt := inner
	for _, w := range wrappers {
		rt = w(rt)
	}
	return rt
}

func newRequest(t *testing.T, ctx context.Context, method, rawURL, body string) *http.Request {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, rawURL, r)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

func TestPathRoundTrippers(t *testing.T) {
	all := []wrapper{client.NewServicePrefixRoundTripper, client.NewShardRoundTripper, client.NewClusterRoundTripper}
	tests := []struct {
		name           string
		path, rawPath  string
		shard, cluster string // in the request context
		prefix         string // want with the prefix round tripper alone
		shardOnly      string // want with the shard round tripper alone
		clusterOnly    string // want with the cluster round tripper alone
		allThree       string // want with all three
	}{
		{
			name:        "empty path",
			path:        "",
			prefix:      "/services/cache",
			shardOnly:   "/services/cache/shards/*",
			clusterOnly: "/services/cache/clusters/*",
			allThree:    "/services/cache/shards/*/clusters/*",
		},
		{
			name:        "API path without prefix",
			path:        "/apis/apis.kcp.io/v1alpha1/apiexports",
			prefix:      "/services/cache/apis/apis.kcp.io/v1alpha1/apiexports",
			shardOnly:   "/services/cache/shards/*/apis/apis.kcp.io/v1alpha1/apiexports",
			clusterOnly: "/services/cache/clusters/*/apis/apis.kcp.io/v1alpha1/apiexports",
			allThree:    "/services/cache/shards/*/clusters/*/apis/apis.kcp.io/v1alpha1/apiexports",
		},
		{
			name:        "path already with service prefix, context names both",
			path:        "/services/cache/apis/g/v1/things",
			shard:       "amber",
			cluster:     "root",
			prefix:      "/services/cache/apis/g/v1/things",
			shardOnly:   "/services/cache/shards/amber/apis/g/v1/things",
			clusterOnly: "/services/cache/clusters/root/apis/g/v1/things",
			allThree:    "/services/cache/shards/amber/clusters/root/apis/g/v1/things",
		},
		{
			name:        "existing wildcard shard is overwritten by the context",
			path:        "/services/cache/shards/*/apis/g/v1/things",
			shard:       "amber",
			prefix:      "/services/cache/shards/*/apis/g/v1/things",
			shardOnly:   "/services/cache/shards/amber/apis/g/v1/things",
			clusterOnly: "/services/cache/shards/*/clusters/*/apis/g/v1/things",
			allThree:    "/services/cache/shards/amber/clusters/*/apis/g/v1/things",
		},
		{
			name:        "existing different shard is overwritten by the context",
			path:        "/services/cache/shards/beige/clusters/root/apis/g/v1/things/x",
			shard:       "amber",
			prefix:      "/services/cache/shards/beige/clusters/root/apis/g/v1/things/x",
			shardOnly:   "/services/cache/shards/amber/clusters/root/apis/g/v1/things/x",
			clusterOnly: "/services/cache/shards/beige/clusters/root/apis/g/v1/things/x",
			allThree:    "/services/cache/shards/amber/clusters/root/apis/g/v1/things/x",
		},
		{
			name:        "existing scope is kept without context",
			path:        "/services/cache/shards/beige/clusters/root/apis/g/v1/things/x",
			prefix:      "/services/cache/shards/beige/clusters/root/apis/g/v1/things/x",
			shardOnly:   "/services/cache/shards/beige/clusters/root/apis/g/v1/things/x",
			clusterOnly: "/services/cache/shards/beige/clusters/root/apis/g/v1/things/x",
			allThree:    "/services/cache/shards/beige/clusters/root/apis/g/v1/things/x",
		},
		{
			name:        "existing clusters segment is overwritten by the context",
			path:        "/services/cache/shards/beige/clusters/root/apis/g/v1/namespaces/ns/things",
			cluster:     "other",
			prefix:      "/services/cache/shards/beige/clusters/root/apis/g/v1/namespaces/ns/things",
			shardOnly:   "/services/cache/shards/beige/clusters/root/apis/g/v1/namespaces/ns/things",
			clusterOnly: "/services/cache/shards/beige/clusters/other/apis/g/v1/namespaces/ns/things",
			allThree:    "/services/cache/shards/beige/clusters/other/apis/g/v1/namespaces/ns/things",
		},
		{
			name:        "clusters segment without shard gets the shard in front",
			path:        "/services/cache/clusters/root/apis/g/v1/things",
			prefix:      "/services/cache/clusters/root/apis/g/v1/things",
			shardOnly:   "/services/cache/shards/*/clusters/root/apis/g/v1/things",
			clusterOnly: "/services/cache/clusters/root/apis/g/v1/things",
			allThree:    "/services/cache/shards/*/clusters/root/apis/g/v1/things",
		},
		{
			name:        "scope without prefix gets the prefix",
			path:        "/shards/beige/clusters/root/apis/g/v1/things",
			prefix:      "/services/cache/shards/beige/clusters/root/apis/g/v1/things",
			shardOnly:   "/services/cache/shards/beige/clusters/root/apis/g/v1/things",
			clusterOnly: "/services/cache/shards/beige/clusters/root/apis/g/v1/things",
			allThree:    "/services/cache/shards/beige/clusters/root/apis/g/v1/things",
		},
		{
			name:        "empty shard segment is filled",
			path:        "/services/cache/shards/",
			prefix:      "/services/cache/shards/",
			shardOnly:   "/services/cache/shards/*",
			clusterOnly: "/services/cache/shards//clusters/*",
			allThree:    "/services/cache/shards/*/clusters/*",
		},
		{
			name:        "shard with colons from context",
			path:        "/apis/g/v1/things",
			shard:       "system:cache:server",
			prefix:      "/services/cache/apis/g/v1/things",
			shardOnly:   "/services/cache/shards/system:cache:server/apis/g/v1/things",
			clusterOnly: "/services/cache/clusters/*/apis/g/v1/things",
			allThree:    "/services/cache/shards/system:cache:server/clusters/*/apis/g/v1/things",
		},
		{
			name:        "a prefix look-alike is not the prefix",
			path:        "/services/cachex/apis",
			prefix:      "/services/cache/services/cachex/apis",
			shardOnly:   "/services/cache/shards/*/services/cachex/apis",
			clusterOnly: "/services/cache/clusters/*/services/cachex/apis",
			allThree:    "/services/cache/shards/*/clusters/*/services/cachex/apis",
		},
		{
			name:        "the prefix inside an API path is not the prefix",
			path:        "/api/v1/namespaces/x/services/cache",
			prefix:      "/services/cache/api/v1/namespaces/x/services/cache",
			shardOnly:   "/services/cache/shards/*/api/v1/namespaces/x/services/cache",
			clusterOnly: "/services/cache/clusters/*/api/v1/namespaces/x/services/cache",
			allThree:    "/services/cache/shards/*/clusters/*/api/v1/namespaces/x/services/cache",
		},
		{
			name:        "RawPath is cleared",
			path:        "/apis/g/v1/things/a:b",
			rawPath:     "/apis/g/v1/things/a%3Ab",
			prefix:      "/services/cache/apis/g/v1/things/a:b",
			shardOnly:   "/services/cache/shards/*/apis/g/v1/things/a:b",
			clusterOnly: "/services/cache/clusters/*/apis/g/v1/things/a:b",
			allThree:    "/services/cache/shards/*/clusters/*/apis/g/v1/things/a:b",
		},
		{
			name: "health is unscoped", path: "/healthz", shard: "amber", cluster: "root",
			prefix: "/healthz", shardOnly: "/healthz", clusterOnly: "/healthz", allThree: "/healthz",
		},
		{
			name: "readyz checks are unscoped", path: "/readyz/etcd", shard: "amber",
			prefix: "/readyz/etcd", shardOnly: "/readyz/etcd", clusterOnly: "/readyz/etcd", allThree: "/readyz/etcd",
		},
		{
			name: "metrics are unscoped", path: "/metrics",
			prefix: "/metrics", shardOnly: "/metrics", clusterOnly: "/metrics", allThree: "/metrics",
		},
		{
			name:        "an unscoped look-alike is scoped",
			path:        "/healthzz",
			prefix:      "/services/cache/healthzz",
			shardOnly:   "/services/cache/shards/*/healthzz",
			clusterOnly: "/services/cache/clusters/*/healthzz",
			allThree:    "/services/cache/shards/*/clusters/*/healthzz",
		},
	}
	const query = "labelSelector=a%3Db&watch=true"
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			if tc.shard != "" {
				ctx = client.WithShard(ctx, tc.shard)
			}
			if tc.cluster != "" {
				ctx = client.WithCluster(ctx, tc.cluster)
			}
			for _, c := range []struct {
				name     string
				wrappers []wrapper
				want     string
			}{
				{"prefix", []wrapper{client.NewServicePrefixRoundTripper}, tc.prefix},
				{"shard", []wrapper{client.NewShardRoundTripper}, tc.shardOnly},
				{"cluster", []wrapper{client.NewClusterRoundTripper}, tc.clusterOnly},
				{"all", all, tc.allThree},
			} {
				rec := &recorder{}
				req := newRequest(t, ctx, http.MethodGet, "https://cache.example:6443/?"+query, "")
				req.URL.Path, req.URL.RawPath = tc.path, tc.rawPath
				original := *req.URL
				if _, err := chain(rec, c.wrappers...).RoundTrip(req); err != nil {
					t.Fatalf("%s: %v", c.name, err)
				}
				got := rec.last(t).URL
				if got.Path != c.want {
					t.Errorf("%s: path %q, want %q", c.name, got.Path, c.want)
				}
				if got.RawPath != "" {
					t.Errorf("%s: RawPath %q not cleared", c.name, got.RawPath)
				}
				if got.RawQuery != query {
					t.Errorf("%s: query %q, want %q", c.name, got.RawQuery, query)
				}
				if got.Host != "cache.example:6443" || got.Scheme != "https" {
					t.Errorf("%s: target changed to %s://%s", c.name, got.Scheme, got.Host)
				}
				if *req.URL != original {
					t.Errorf("%s: the caller's request was modified: %v", c.name, req.URL)
				}
			}
		})
	}
}

// TestPathRoundTrippersCommute checks that every composition order gives the
// same path, so callers may Wrap them in any order.
func TestPathRoundTrippersCommute(t *testing.T) {
	ws := []wrapper{client.NewServicePrefixRoundTripper, client.NewShardRoundTripper, client.NewClusterRoundTripper, client.NewShardFromObjectRoundTripper}
	perms := permutations(len(ws))
	paths := []string{"", "/apis/g/v1/things", "/services/cache/shards/beige/apis/g/v1/things", "/clusters/root/apis/g/v1/things"}
	contexts := map[string]context.Context{
		"none":    context.Background(),
		"shard":   client.WithShard(context.Background(), "amber"),
		"cluster": client.WithCluster(context.Background(), "root"),
		"both":    client.WithCluster(client.WithShard(context.Background(), "amber"), "root"),
	}
	for _, p := range paths {
		for ctxName, ctx := range contexts {
			want := ""
			for _, perm := range perms {
				rec := &recorder{}
				ordered := make([]wrapper, len(perm))
				for i, j := range perm {
					ordered[i] = ws[j]
				}
				req := newRequest(t, ctx, http.MethodGet, "https://cache.example", "")
				req.URL.Path = p
				if _, err := chain(rec, ordered...).RoundTrip(req); err != nil {
					t.Fatal(err)
				}
				got := rec.last(t).URL.Path
				if want == "" {
					want = got
				} else if got != want {
					t.Errorf("path %q, context %s, order %v: got %q, another order gave %q", p, ctxName, perm, got, want)
				}
			}
		}
	}
}

func permutations(n int) [][]int {
	if n == 1 {
		return [][]int{{0}}
	}
	var out [][]int
	for _, p := range permutations(n - 1) {
		for i := 0; i <= len(p); i++ {
			q := append(append(append([]int{}, p[:i]...), n-1), p[i:]...)
			out = append(out, q)
		}
	}
	return out
}

type closeTracker struct {
	io.Reader
	closed bool
}

func (c *closeTracker) Close() error { c.closed = true; return nil }

func TestPathRoundTrippersRejectInvalidContext(t *testing.T) {
	tests := []struct {
		name string
		ctx  context.Context
		rt   wrapper
	}{
		{"shard with a slash", client.WithShard(context.Background(), "a/b"), client.NewShardRoundTripper},
		{"upper-case shard", client.WithShard(context.Background(), "Amber"), client.NewShardRoundTripper},
		{"cluster path instead of name", client.WithCluster(context.Background(), "root:org"), client.NewClusterRoundTripper},
		{"cluster with a slash", client.WithCluster(context.Background(), "../x"), client.NewClusterRoundTripper},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{}
			body := &closeTracker{Reader: strings.NewReader("{}")}
			req := newRequest(t, tc.ctx, http.MethodPost, "https://cache.example/apis/g/v1/things", "")
			req.Body = body
			if _, err := tc.rt(rec).RoundTrip(req); err == nil {
				t.Fatal("want an error")
			}
			if len(rec.reqs) != 0 {
				t.Errorf("a request reached the wire: %v", rec.reqs[0].URL)
			}
			if !body.closed {
				t.Error("request body not closed on error")
			}
		})
	}
}

func TestShardFromObjectRoundTripper(t *testing.T) {
	const scoped = "/services/cache/shards/*/clusters/root/apis/g/v1/things"
	withShard := `{"apiVersion":"g/v1","kind":"Thing","metadata":{"name":"x","annotations":{"kcp.io/shard":"amber"}}}`
	tests := []struct {
		name        string
		method      string
		path        string
		contentType string
		body        string
		want        string
	}{
		{name: "POST routes to the annotated shard", method: http.MethodPost, path: scoped, body: withShard,
			want: "/services/cache/shards/amber/clusters/root/apis/g/v1/things"},
		{name: "PUT overwrites a different shard", method: http.MethodPut, path: "/services/cache/shards/beige/clusters/root/apis/g/v1/things/x", body: withShard,
			want: "/services/cache/shards/amber/clusters/root/apis/g/v1/things/x"},
		{name: "PUT inserts the shard and prefix", method: http.MethodPut, path: "/apis/g/v1/things/x", body: withShard,
			want: "/services/cache/shards/amber/apis/g/v1/things/x"},
		{name: "merge PATCH", method: http.MethodPatch, path: scoped + "/x", contentType: "application/merge-patch+json",
			body: `{"metadata":{"annotations":{"kcp.io/shard":"amber"}}}`,
			want: "/services/cache/shards/amber/clusters/root/apis/g/v1/things/x"},
		{name: "apply PATCH in YAML", method: http.MethodPatch, path: scoped + "/x", contentType: "application/apply-patch+yaml",
			body: "metadata:\n  name: x\n  annotations:\n    kcp.io/shard: amber\n",
			want: "/services/cache/shards/amber/clusters/root/apis/g/v1/things/x"},
		{name: "JSON patch has no object", method: http.MethodPatch, path: scoped + "/x", contentType: "application/json-patch+json",
			body: `[{"op":"add","path":"/metadata/annotations/kcp.io~1shard","value":"amber"}]`, want: scoped + "/x"},
		{name: "no annotation", method: http.MethodPost, path: scoped, body: `{"metadata":{"name":"x"}}`, want: scoped},
		{name: "not JSON", method: http.MethodPost, path: scoped, body: `not json`, want: scoped},
		{name: "invalid shard name never becomes a segment", method: http.MethodPost, path: scoped,
			body: `{"metadata":{"annotations":{"kcp.io/shard":"../x"}}}`, want: scoped},
		{name: "GET is not inspected", method: http.MethodGet, path: scoped, want: scoped},
		{name: "DELETE is not inspected", method: http.MethodDelete, path: scoped + "/x", body: withShard, want: scoped + "/x"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{}
			req := newRequest(t, context.Background(), tc.method, "https://cache.example/?dryRun=All", tc.body)
			req.URL.Path = tc.path
			if tc.contentType != "" {
				req.Header.Set("Content-Type", tc.contentType)
			}
			if _, err := client.NewShardFromObjectRoundTripper(rec).RoundTrip(req); err != nil {
				t.Fatal(err)
			}
			got := rec.last(t)
			if got.URL.Path != tc.want {
				t.Errorf("path %q, want %q", got.URL.Path, tc.want)
			}
			if got.URL.RawQuery != "dryRun=All" {
				t.Errorf("query %q lost", got.URL.RawQuery)
			}
			if rec.bodies[0] != tc.body {
				t.Errorf("body %q, want it restored as %q", rec.bodies[0], tc.body)
			}
			if tc.body != "" && got.ContentLength != int64(len(tc.body)) {
				t.Errorf("ContentLength %d, want %d", got.ContentLength, len(tc.body))
			}
			if got.GetBody != nil {
				b, err := got.GetBody()
				if err != nil {
					t.Fatal(err)
				}
				again, _ := io.ReadAll(b)
				if string(again) != tc.body {
					t.Errorf("GetBody gives %q, want %q", again, tc.body)
				}
			}
			if req.URL.Path != tc.path {
				t.Errorf("the caller's request was modified: %q", req.URL.Path)
			}
		})
	}
}

// TestShardFromObjectWinsOverContext checks that the object's shard decides
// in either order of composition with the context round tripper.
func TestShardFromObjectWinsOverContext(t *testing.T) {
	body := `{"metadata":{"name":"x","annotations":{"kcp.io/shard":"amber"}}}`
	orders := map[string][]wrapper{
		"object outside": {client.NewShardRoundTripper, client.NewShardFromObjectRoundTripper},
		"object inside":  {client.NewShardFromObjectRoundTripper, client.NewShardRoundTripper},
	}
	for name, ws := range orders {
		t.Run(name, func(t *testing.T) {
			rec := &recorder{}
			req := newRequest(t, client.WithShard(context.Background(), "beige"), http.MethodPost, "https://cache.example/apis/g/v1/things", body)
			if _, err := chain(rec, ws...).RoundTrip(req); err != nil {
				t.Fatal(err)
			}
			if got, want := rec.last(t).URL.Path, "/services/cache/shards/amber/apis/g/v1/things"; got != want {
				t.Errorf("path %q, want %q", got, want)
			}
		})
	}
}

type failingReader struct{}

func (failingReader) Read([]byte) (int, error) { return 0, errors.New("boom") }

func TestShardFromObjectBodyError(t *testing.T) {
	rec := &recorder{}
	body := &closeTracker{Reader: failingReader{}}
	req := newRequest(t, context.Background(), http.MethodPost, "https://cache.example/apis/g/v1/things", "")
	req.Body = body
	if _, err := client.NewShardFromObjectRoundTripper(rec).RoundTrip(req); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("err = %v, want the read error", err)
	}
	if len(rec.reqs) != 0 {
		t.Error("a request reached the wire")
	}
	if !body.closed {
		t.Error("body not closed")
	}
}

func TestRequestPathRoundTrip(t *testing.T) {
	// Parsing then rendering a canonical path must be the identity.
	for _, p := range []string{
		"/services/cache",
		"/services/cache/shards/a/clusters/b",
		"/services/cache/shards/a/clusters/b/apis/g/v1/namespaces/ns/things/x",
		"/services/cache/apis",
	} {
		rp, ok := client.ParseRequestPath(p)
		if !ok {
			t.Fatalf("%q: not scoped", p)
		}
		if got := rp.String(); got != p {
			t.Errorf("%q rendered as %q", p, got)
		}
	}
	wildcards, _ := client.ParseRequestPath("/services/cache/shards/*/clusters/*/apis")
	if _, err := url.Parse("https://x" + wildcards.String()); err != nil {
		t.Errorf("wildcards do not form a valid URL: %v", err)
	}
}
