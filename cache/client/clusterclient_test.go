package client_test

import (
	kcpcache "github.com/kcp-cache/kcp-cache/cache"

	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"

	"github.com/kcp-cache/kcp-cache/cache/client"
)

func listOptions() metav1.ListOptions { return metav1.ListOptions{} }
func getOptions() metav1.GetOptions   { return metav1.GetOptions{} }

func TestClusterClientPaths(t *testing.T) {
	srv := newFakeServer(t)
	ctx := context.Background()
	for _, base := range []string{srv.URL, srv.URL + "/services/cache/shards/beige/clusters/other"} {
		cc, err := client.NewForConfig(&rest.Config{Host: base})
		if err != nil {
			t.Fatal(err)
		}
		tests := []struct {
			name string
			do   func() error
			want string
		}{
			{"cluster-scoped get", func() error {
				_, err := cc.Cluster("amber", "root").Resource(thingsGVR).Get(ctx, "x", getOptions())
				return err
			}, "/services/cache/shards/amber/clusters/root/apis/g/v1/things/x"},
			{"namespaced get", func() error {
				_, err := cc.Cluster("amber", "root").Resource(thingsGVR).Namespace("ns").Get(ctx, "x", getOptions())
				return err
			}, "/services/cache/shards/amber/clusters/root/apis/g/v1/namespaces/ns/things/x"},
			{"wildcard list", func() error {
				_, err := cc.Cluster("*", "*").Resource(thingsGVR).List(ctx, listOptions())
				return err
			}, "/services/cache/shards/*/clusters/*/apis/g/v1/things"},
			{"one cluster across shards", func() error {
				_, err := cc.Cluster("*", "root").Resource(thingsGVR).List(ctx, listOptions())
				return err
			}, "/services/cache/shards/*/clusters/root/apis/g/v1/things"},
			{"create", func() error {
				obj := &unstructured.Unstructured{}
				obj.SetAPIVersion("g/v1")
				obj.SetKind("Thing")
				obj.SetName("x")
				_, err := cc.Cluster("amber", "root").Resource(thingsGVR).Create(ctx, obj, metav1.CreateOptions{})
				return err
			}, "/services/cache/shards/amber/clusters/root/apis/g/v1/things"},
		}
		for _, tc := range tests {
			t.Run(base+" "+tc.name, func(t *testing.T) {
				if err := tc.do(); err != nil {
					t.Fatal(err)
				}
				if got := srv.lastPath(t); got != tc.want {
					t.Errorf("path %q, want %q", got, tc.want)
				}
			})
		}
	}
}

func TestClusterClientInvalidScope(t *testing.T) {
	srv := newFakeServer(t)
	cc, err := client.NewForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	for _, scope := range [][2]string{{"a/b", "root"}, {"amber", "root:org"}, {"", "root"}, {"amber", ".."}} {
		_, err := cc.Cluster(scope[0], scope[1]).Resource(thingsGVR).Get(context.Background(), "x", getOptions())
		if err == nil {
			t.Errorf("scope %v: want an error", scope)
		}
	}
	if n := srv.requests(); n != 0 {
		t.Errorf("%d requests reached the server", n)
	}
}

func TestNewForConfigRejectsBadHost(t *testing.T) {
	if _, err := client.NewForConfig(&rest.Config{Host: "https://cache.example/%zz"}); err == nil {
		t.Error("want an error")
	}
}

func TestClusterClientSharesRateLimiter(t *testing.T) {
	cc, err := client.NewForConfig(&rest.Config{Host: "https://cache.example", QPS: 3, Burst: 4})
	if err != nil {
		t.Fatal(err)
	}
	if cc.RESTConfig().RateLimiter == nil || cc.RESTConfig().RateLimiter.QPS() != 3 {
		t.Fatalf("no shared rate limiter with the config's QPS: %v", cc.RESTConfig().RateLimiter)
	}
}

func TestClusterClientWithPaths(t *testing.T) {
	srv := newFakeServer(t)
	ctx := context.Background()
	cc, err := client.NewForConfigWithPaths(&rest.Config{Host: srv.URL}, func(s kcpcache.Scope) string { return "/clusters/" + s.Cluster })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cc.Cluster("amber", "*").Resource(thingsGVR).List(ctx, listOptions()); err != nil {
		t.Fatal(err)
	}
	if got, want := srv.lastPath(t), "/clusters/*/apis/g/v1/things"; got != want {
		t.Errorf("path %q, want %q", got, want)
	}
	if _, err := cc.Cluster("amber", "root:org").Resource(thingsGVR).List(ctx, listOptions()); err == nil {
		t.Error("an invalid cluster must fail before any request")
	}
}

// A ClusterClient on the caller's HTTP client sends through its transport,
// and records the epochs of its own responses only.
func TestClusterClientOnTheCallersClient(t *testing.T) {
	epoch := "one"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(kcpcache.EpochHeader, epoch)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"apiVersion":"g/v1","kind":"ThingList","metadata":{"resourceVersion":"1"},"items":[]}`))
	}))
	defer srv.Close()
	var sent []string
	hc := &http.Client{Transport: roundTripperFunc(func(r *http.Request) (*http.Response, error) {
		sent = append(sent, r.URL.Path)
		return http.DefaultTransport.RoundTrip(r)
	})}
	cc, err := client.NewForConfigAndClient(&rest.Config{Host: srv.URL}, hc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cc.Cluster("*", "*").Resource(thingsGVR).List(context.Background(), listOptions()); err != nil {
		t.Fatal(err)
	}
	if e, _ := cc.Epochs().Current(); e != "one" {
		t.Errorf("epoch after the client's list %q, want one", e)
	}
	epoch = "two"
	resp, err := hc.Get(srv.URL + "/own")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if e, _ := cc.Epochs().Current(); e != "one" {
		t.Errorf("epoch after the caller's own request %q, want one (not counted)", e)
	}
	want := []string{"/services/cache/shards/*/clusters/*/apis/g/v1/things", "/own"}
	if strings.Join(sent, " ") != strings.Join(want, " ") {
		t.Errorf("through the caller's transport: %v, want %v", sent, want)
	}
}
