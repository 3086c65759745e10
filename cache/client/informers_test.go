package client_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"k8s.io/client-go/rest"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/client"
	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
)

func TestInformerFactoryScopeDefaults(t *testing.T) {
	cc, err := client.NewForConfig(&rest.Config{Host: "https://cache.example"})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		in, want kcpcache.Scope
	}{
		{kcpcache.Scope{}, kcpcache.Scope{Shard: "*", Cluster: "*"}},
		{kcpcache.Scope{Shard: "amber"}, kcpcache.Scope{Shard: "amber", Cluster: "*"}},
		{kcpcache.Scope{Cluster: "root"}, kcpcache.Scope{Shard: "*", Cluster: "root"}},
		{kcpcache.Scope{Shard: "amber", Cluster: "root"}, kcpcache.Scope{Shard: "amber", Cluster: "root"}},
	}
	for _, tc := range tests {
		if got := client.NewInformerFactory(cc, tc.in, 0).Scope(); got != tc.want {
			t.Errorf("scope %v defaults to %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestInformerFactorySharesInformers(t *testing.T) {
	cc, err := client.NewForConfig(&rest.Config{Host: "https://cache.example"})
	if err != nil {
		t.Fatal(err)
	}
	f := client.NewInformerFactory(cc, kcpcache.Scope{}, 0)
	a, b := f.ForResource(apiExportsGVR), f.ForResource(apiExportsGVR)
	if a != b {
		t.Error("two informers for one resource")
	}
	if other := f.ForResource(thingsGVR); other == a {
		t.Error("one informer for two resources")
	}
}

func TestInformerFactoryStartAfterShutdown(t *testing.T) {
	cc, err := client.NewForConfig(&rest.Config{Host: "https://cache.example"})
	if err != nil {
		t.Fatal(err)
	}
	f := client.NewInformerFactory(cc, kcpcache.Scope{}, 0)
	inf := f.ForResource(apiExportsGVR)
	f.Shutdown()
	f.Start(context.Background())
	if got := f.WaitForCacheSync(context.Background()); len(got) != 0 {
		t.Errorf("informers started after Shutdown: %v", got)
	}
	// The informer never ran, so it can still be added to.
	if _, err := inf.AddEventHandler(newRecordingHandler()); err != nil {
		t.Error(err)
	}
}

// TestInformerFactoryShutdownStopsInformers runs an informer against a server
// that never answers usefully, and checks that Shutdown ends it.
func TestInformerFactoryShutdownStopsInformers(t *testing.T) {
	// A server that fails every request: the informer lists, fails and
	// retries, and never syncs.
	var lists atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/apiexports") {
			lists.Add(1)
		}
		http.Error(w, "unavailable", http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	cc, err := client.NewForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	f := client.NewInformerFactory(cc, kcpcache.Scope{}, 0)
	inf := f.ForResource(apiExportsGVR)
	f.Start(context.Background())
	// A second list attempt means the first one has failed, so the
	// informer had its chance to (wrongly) call itself synced.
	if err := cachetest.Poll(context.Background(), func(context.Context) error {
		if n := lists.Load(); n < 2 {
			return fmt.Errorf("%d list attempts, want 2", n)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if inf.HasSynced() {
		t.Error("synced although every list failed")
	}
	f.Shutdown()
	if !inf.IsStopped() {
		t.Error("informer still running after Shutdown")
	}
}
