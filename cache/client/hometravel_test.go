package client_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/client"
)

// peerCache is a fake cache that answers every request with the headers the
// test set last, and an empty list.
type peerCache struct {
	mu              sync.Mutex
	name, revisions string
	status          int
	*httptest.Server
}

func newPeerCache(t *testing.T) *peerCache {
	p := &peerCache{status: http.StatusOK}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		p.mu.Lock()
		name, revisions, status := p.name, p.revisions, p.status
		p.mu.Unlock()
		if name != "" {
			w.Header().Set(kcpcache.CacheNameHeader, name)
		}
		if revisions != "" {
			w.Header().Set(kcpcache.HomeRevisionHeader, revisions)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = w.Write([]byte(`{"apiVersion":"apis.kcp.io/v1alpha1","kind":"APIExportList","metadata":{"resourceVersion":"1"},"items":[]}`))
	}))
	t.Cleanup(p.Close)
	return p
}

// answer sets what the next responses carry.
func (p *peerCache) answer(name, revisions string, status int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.name, p.revisions, p.status = name, revisions, status
}

// bodyCloses records whether each response body was closed.
type bodyCloses struct {
	delegate http.RoundTripper
	last     *trackedBody
}

type trackedBody struct {
	io.ReadCloser
	closed bool
}

func (b *trackedBody) Close() error {
	b.closed = true
	return b.ReadCloser.Close()
}

func (b *bodyCloses) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := b.delegate.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	b.last = &trackedBody{ReadCloser: resp.Body}
	resp.Body = b.last
	return resp, nil
}

const exportsOfAmber = "/services/cache/shards/amber/clusters/root/apis/apis.kcp.io/v1alpha1/apiexports"

// A response that reflects an older revision of a home than one accepted
// for the same shard segment and resource is refused, with its body closed
// and an error that says who answered what; other epochs, shards,
// resources, methods and failures are not compared, nor the home's own
// answer for its data.
func TestHomeRevisionsRefuseAnOlderStateOfAHome(t *testing.T) {
	peer := newPeerCache(t)
	memory := client.NewHomeRevisions()
	wire := &bodyCloses{delegate: peer.Client().Transport}
	rt := memory.Wrap(wire)
	do := func(method, path string) (*http.Response, error) {
		t.Helper()
		req, err := http.NewRequest(method, peer.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := rt.RoundTrip(req)
		if err == nil {
			_ = resp.Body.Close()
		}
		return resp, err
	}
	accept := func(what, name, revisions, method, path string, status int) {
		t.Helper()
		peer.answer(name, revisions, status)
		if _, err := do(method, path); err != nil {
			t.Errorf("%s: refused: %v", what, err)
		}
	}
	refuseStatus := func(what, name, revisions, path string, status int) *client.TimeTravelError {
		t.Helper()
		peer.answer(name, revisions, status)
		resp, err := do(http.MethodGet, path)
		var travel *client.TimeTravelError
		if !errors.As(err, &travel) || resp != nil {
			t.Fatalf("%s: got %v, %v; want a *TimeTravelError and no response", what, resp, err)
		}
		if !wire.last.closed {
			t.Errorf("%s: the refused response's body was not closed", what)
		}
		return travel
	}
	refuse := func(what, name, revisions, path string) *client.TimeTravelError {
		t.Helper()
		return refuseStatus(what, name, revisions, path, http.StatusOK)
	}

	accept("first answer", "east", "east=e1/10", http.MethodGet, exportsOfAmber, http.StatusOK)
	travel := refuse("a mirror behind", "west", "east=e1/5", exportsOfAmber)
	want := client.TimeTravelError{Home: "east", Epoch: "e1", Shard: "amber", Resource: "apiexports.apis.kcp.io", Seen: 10, Answered: 5, Cache: "west"}
	if *travel != want {
		t.Errorf("error %+v, want %+v", *travel, want)
	}
	t.Logf("the refusal reads: %v", travel)
	// One type of one shard, whatever the cluster, namespace or name.
	refuse("a get of one object", "west", "east=e1/7", "/services/cache/shards/amber/clusters/other/apis/apis.kcp.io/v1alpha1/apiexports/x")
	accept("the same revision", "west", "east=e1/10", http.MethodGet, exportsOfAmber, http.StatusOK)

	// The home itself never goes back: its revision is that of the data's
	// last change, which may be below a mirror's applied revision.
	accept("the home below a mirror's revision", "east", "east=e1/8", http.MethodGet, exportsOfAmber, http.StatusOK)
	if seen, _ := memory.Seen("east", "e1", "amber", "apiexports.apis.kcp.io"); seen != 10 {
		t.Errorf("seen %d after the home answered 8, want 10 kept", seen)
	}
	accept("another epoch of the home", "east", "east=e2/3", http.MethodGet, exportsOfAmber, http.StatusOK)
	if seen, _ := memory.Seen("east", "e1", "amber", "apiexports.apis.kcp.io"); seen != 10 {
		t.Errorf("epoch e1 seen at %d after an answer in e2, want 10", seen)
	}
	accept("another shard", "west", "east=e1/1", http.MethodGet, "/services/cache/shards/blue/clusters/root/apis/apis.kcp.io/v1alpha1/apiexports", http.StatusOK)
	accept("another resource", "west", "east=e1/1", http.MethodGet, "/services/cache/shards/amber/clusters/root/api/v1/namespaces/default/configmaps", http.StatusOK)
	accept("no header", "west", "", http.MethodGet, exportsOfAmber, http.StatusOK)
	accept("not a GET", "west", "east=e1/1", http.MethodPost, exportsOfAmber, http.StatusCreated)
	accept("a failure", "west", "east=e1/1", http.MethodGet, exportsOfAmber, http.StatusServiceUnavailable)
	// A 404 of a mirror behind, which lacks an object the reader may have
	// seen, would make it vanish.
	refuseStatus("a 404 of a mirror behind", "west", "east=e1/9", exportsOfAmber+"/x", http.StatusNotFound)
	accept("a 404 as new as what was seen", "west", "east=e1/10", http.MethodGet, exportsOfAmber+"/x", http.StatusNotFound)
	if seen, _ := memory.Seen("east", "e1", "amber", "apiexports.apis.kcp.io"); seen != 10 {
		t.Errorf("seen %d after answers that are not compared, want 10", seen)
	}

	// Several homes in one answer: one going back refuses the answer, and
	// nothing of it is recorded.
	accept("two homes", "south", "east=e1/11, west=w1/4", http.MethodGet, exportsOfAmber, http.StatusOK)
	travel = refuse("one of two homes behind", "south", "east=e1/12, west=w1/3", exportsOfAmber)
	if travel.Home != "west" || travel.Seen != 4 || travel.Answered != 3 {
		t.Errorf("refused for %+v, want west's 3 below 4", *travel)
	}
	if seen, _ := memory.Seen("east", "e1", "amber", "apiexports.apis.kcp.io"); seen != 11 {
		t.Errorf("east seen at %d after a refused answer, want 11", seen)
	}
}

// Configs from NewConfig share the process's memory: a reader that reads
// one cache and then another that is behind is refused there, through
// client-go, and the retry passes once that cache has caught up.
func TestNewConfigRefusesTimeTravelAcrossCaches(t *testing.T) {
	east, west := newPeerCache(t), newPeerCache(t)
	// A home name no other test uses: the memory is the process's.
	const home = "home-of-new-config-test"
	exports := schema.GroupVersionResource{Group: "apis.kcp.io", Version: "v1alpha1", Resource: "apiexports"}
	list := func(p *peerCache) error {
		t.Helper()
		cfg, err := client.ConfigFromURL(p.URL)
		if err != nil {
			t.Fatal(err)
		}
		dyn, err := dynamic.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		ctx := client.WithShard(context.Background(), "amber")
		_, err = dyn.Resource(exports).List(ctx, metav1.ListOptions{})
		return err
	}

	east.answer(home, home+"=e/20", http.StatusOK)
	if err := list(east); err != nil {
		t.Fatal(err)
	}
	west.answer("west", home+"=e/19", http.StatusOK)
	err := list(west)
	var travel *client.TimeTravelError
	if !errors.As(err, &travel) || travel.Cache != "west" || travel.Seen != 20 || travel.Answered != 19 || travel.Shard != "amber" {
		t.Fatalf("listing at a cache behind: %v, want a *TimeTravelError from west, 19 below 20, shard amber", err)
	}
	west.answer("west", home+"=e/20", http.StatusOK)
	if err := list(west); err != nil {
		t.Errorf("listing again once west caught up: %v", err)
	}
}

func TestResourceOfAPIPath(t *testing.T) {
	for path, want := range map[string]string{
		"/api/v1/configmaps":                          "configmaps",
		"/api/v1/namespaces/default/configmaps/cm":    "configmaps",
		"/api/v1/watch/namespaces/default/configmaps": "configmaps",
		"/api/v1/namespaces":                          "namespaces",
		"/api/v1/namespaces/default":                  "namespaces",
		"/api/v1/namespaces/default/status":           "namespaces",
		"/apis/apis.kcp.io/v1alpha1/apiexports":       "apiexports.apis.kcp.io",
		"/apis/apis.kcp.io/v1/apiexports/x/status":    "apiexports.apis.kcp.io",
		"/apis/example.dev/v1/namespaces/ns/things/x": "things.example.dev",
		"/apis/apis.kcp.io/v1alpha1":                  "/apis/apis.kcp.io/v1alpha1",
		"/api":                                        "/api",
	} {
		if got := client.ResourceOfAPIPath(path); got != want {
			t.Errorf("%s: %q, want %q", path, got, want)
		}
	}
}
