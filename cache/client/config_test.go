package client_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/kcp-cache/kcp-cache/cache/client"
)

var thingsGVR = schema.GroupVersionResource{Group: "g", Version: "v1", Resource: "things"}

func TestScopedConfig(t *testing.T) {
	tests := []struct {
		name           string
		base           rest.Config
		shard, cluster string
		want           string
		wantErr        bool
	}{
		{name: "server root", base: rest.Config{Host: "https://cache.example:6443"}, shard: "amber", cluster: "root",
			want: "https://cache.example:6443/services/cache/shards/amber/clusters/root"},
		{name: "wildcards", base: rest.Config{Host: "https://cache.example:6443/"}, shard: "*", cluster: "*",
			want: "https://cache.example:6443/services/cache/shards/*/clusters/*"},
		{name: "host:port without TLS is http", base: rest.Config{Host: "cache.example:6443"}, shard: "amber", cluster: "*",
			want: "http://cache.example:6443/services/cache/shards/amber/clusters/*"},
		{name: "host:port with a CA is https", base: rest.Config{Host: "cache.example:6443", TLSClientConfig: rest.TLSClientConfig{CAData: []byte("ca")}},
			shard: "*", cluster: "root", want: "https://cache.example:6443/services/cache/shards/*/clusters/root"},
		{name: "an existing scope is replaced", base: rest.Config{Host: "https://cache.example/services/cache/shards/beige/clusters/other"},
			shard: "amber", cluster: "root", want: "https://cache.example/services/cache/shards/amber/clusters/root"},
		{name: "a proxy path is kept", base: rest.Config{Host: "https://proxy.example/cache-1/"}, shard: "amber", cluster: "root",
			want: "https://proxy.example/cache-1/services/cache/shards/amber/clusters/root"},
		{name: "a proxy path before a scope is kept", base: rest.Config{Host: "https://proxy.example/cache-1/services/cache/shards/beige/clusters/other/"},
			shard: "amber", cluster: "root", want: "https://proxy.example/cache-1/services/cache/shards/amber/clusters/root"},
		{name: "shard with colons", base: rest.Config{Host: "https://cache.example"}, shard: "system:cache:server", cluster: "system:system-crds",
			want: "https://cache.example/services/cache/shards/system:cache:server/clusters/system:system-crds"},
		{name: "invalid shard", base: rest.Config{Host: "https://cache.example"}, shard: "a/b", cluster: "root", wantErr: true},
		{name: "empty shard", base: rest.Config{Host: "https://cache.example"}, shard: "", cluster: "root", wantErr: true},
		{name: "workspace path as cluster", base: rest.Config{Host: "https://cache.example"}, shard: "amber", cluster: "root:org", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			base := tc.base
			got, err := client.ScopedConfig(&base, tc.shard, tc.cluster)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("want an error, got host %q", got.Host)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Host != tc.want {
				t.Errorf("host %q, want %q", got.Host, tc.want)
			}
			if base.Host != tc.base.Host {
				t.Errorf("base modified: %q", base.Host)
			}
		})
	}
}

// fakeServer answers every request with an empty list or object and records
// the paths and Accept headers it saw.
type fakeServer struct {
	*httptest.Server
	mu      sync.Mutex
	paths   []string
	accepts []string
}

func newFakeServer(t *testing.T) *fakeServer {
	f := &fakeServer{}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.paths = append(f.paths, r.URL.Path)
		f.accepts = append(f.accepts, r.Header.Get("Accept"))
		f.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if strings.HasSuffix(r.URL.Path, "/things") {
			_, _ = w.Write([]byte(`{"apiVersion":"g/v1","kind":"ThingList","metadata":{"resourceVersion":"1"},"items":[]}`))
			return
		}
		_, _ = w.Write([]byte(`{"apiVersion":"g/v1","kind":"Thing","metadata":{"name":"x"}}`))
	}))
	t.Cleanup(f.Close)
	return f
}

func (f *fakeServer) lastPath(t *testing.T) string {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.paths) == 0 {
		t.Fatal("no request reached the server")
	}
	return f.paths[len(f.paths)-1]
}

func (f *fakeServer) requests() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.paths)
}

func TestNewConfigRoutesByContext(t *testing.T) {
	srv := newFakeServer(t)
	cc, err := dynamic.NewForConfig(client.NewConfig(&rest.Config{Host: srv.URL}))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	tests := []struct {
		name string
		do   func() error
		want string
	}{
		{"no context lists every partition", func() error {
			_, err := cc.Resource(thingsGVR).List(ctx, listOptions())
			return err
		}, "/services/cache/shards/*/clusters/*/apis/g/v1/things"},
		{"shard and cluster from the context", func() error {
			_, err := cc.Resource(thingsGVR).Namespace("ns").Get(client.WithCluster(client.WithShard(ctx, "amber"), "root"), "x", getOptions())
			return err
		}, "/services/cache/shards/amber/clusters/root/apis/g/v1/namespaces/ns/things/x"},
		{"cluster only", func() error {
			_, err := cc.Resource(thingsGVR).List(client.WithCluster(ctx, "root"), listOptions())
			return err
		}, "/services/cache/shards/*/clusters/root/apis/g/v1/things"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.do(); err != nil {
				t.Fatal(err)
			}
			if got := srv.lastPath(t); got != tc.want {
				t.Errorf("path %q, want %q", got, tc.want)
			}
		})
	}
	for _, a := range srv.accepts {
		if a != "application/json" {
			t.Errorf("Accept %q, want JSON only", a)
		}
	}
}

func TestConfigFromURL(t *testing.T) {
	tests := []struct {
		url     string
		wantErr bool
	}{
		{url: "https://cache.example:6443"},
		{url: "http://127.0.0.1:8080/services/cache/shards/amber/clusters/root"},
		{url: "cache.example:6443", wantErr: true},
		{url: "ftp://cache.example", wantErr: true},
		{url: "https://user:secret@cache.example", wantErr: true},
		{url: "https://cache.example/?x=y", wantErr: true},
		{url: "https://", wantErr: true},
		{url: "://", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.url, func(t *testing.T) {
			cfg, err := client.ConfigFromURL(tc.url)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("want an error, got %q", cfg.Host)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Host != tc.url {
				t.Errorf("host %q, want %q", cfg.Host, tc.url)
			}
			if cfg.ContentType != "application/json" || cfg.WrapTransport == nil {
				t.Errorf("config not prepared by NewConfig: %+v", cfg)
			}
		})
	}
}

func TestConfigFromURLRoutes(t *testing.T) {
	srv := newFakeServer(t)
	cfg, err := client.ConfigFromURL(srv.URL + "/services/cache/shards/amber/clusters/root")
	if err != nil {
		t.Fatal(err)
	}
	cc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cc.Resource(thingsGVR).List(client.WithCluster(context.Background(), "other"), listOptions()); err != nil {
		t.Fatal(err)
	}
	// The URL's shard stays the default; the context overrides the cluster.
	if got, want := srv.lastPath(t), "/services/cache/shards/amber/clusters/other/apis/g/v1/things"; got != want {
		t.Errorf("path %q, want %q", got, want)
	}
}

func TestConfigFromKubeconfig(t *testing.T) {
	kubeconfig := `apiVersion: v1
kind: Config
clusters:
- name: one
  cluster: {server: "https://one.example:6443"}
- name: two
  cluster: {server: "https://two.example:6443/services/cache/shards/amber/clusters/root"}
users:
- name: admin
  user: {token: secret}
contexts:
- name: one
  context: {cluster: one, user: admin}
- name: two
  context: {cluster: two, user: admin}
current-context: one
`
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, []byte(kubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		context  string
		wantHost string
	}{
		{"", "https://one.example:6443"},
		{"two", "https://two.example:6443/services/cache/shards/amber/clusters/root"},
	}
	for _, tc := range tests {
		t.Run("context "+tc.context, func(t *testing.T) {
			cfg, err := client.ConfigFromKubeconfig(path, tc.context)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Host != tc.wantHost {
				t.Errorf("host %q, want %q", cfg.Host, tc.wantHost)
			}
			if cfg.BearerToken != "secret" || cfg.ContentType != "application/json" || cfg.WrapTransport == nil {
				t.Errorf("config incomplete: token %q, content type %q", cfg.BearerToken, cfg.ContentType)
			}
		})
	}
	if _, err := client.ConfigFromKubeconfig(path, "missing"); err == nil {
		t.Error("want an error for a missing context")
	}
	if _, err := client.ConfigFromKubeconfig(filepath.Join(t.TempDir(), "none"), ""); err == nil {
		t.Error("want an error for a missing file")
	}
}
