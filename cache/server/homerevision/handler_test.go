package homerevision_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/server/homerevision"
)

func get(t *testing.T, srv *httptest.Server, method, query string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+kcpcache.RevisionPath+"?"+query, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	var raw json.RawMessage
	if err := json.NewDecoder(resp.Body).Decode(&raw); err != nil {
		t.Fatalf("%s %s: body is not JSON: %v", method, query, err)
	}
	return resp, raw
}

// The handler answers the tracker's revision, names the cache and its
// epoch, and refuses what it cannot answer with a Status.
func TestHandlerAnswersOrRefusesWithAStatus(t *testing.T) {
	c := homerevision.StartEtcd(t)
	tr := runTracker(t, c)
	// Shard moved is homed at west by the claims.
	elsewhere := func(shard string) (string, int64, bool) { return "west", 2, shard == "moved" }
	srv := httptest.NewServer(homerevision.Handler(tr, "east", func() string { return "epoch-1" }, elsewhere, nil))
	defer srv.Close()

	// Initialised before the write: the write is above the floor.
	revision(t, tr, "amber", exports)
	written := put(t, c, objectKey(exports, "amber", "root", "a"))
	resp, body := get(t, srv, http.MethodGet, "shard=amber&resource=apiexports.apis.kcp.io")
	var answer kcpcache.HomeRevisionAnswer
	if err := json.Unmarshal(body, &answer); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("answer %d %s: %v", resp.StatusCode, body, err)
	}
	if answer.Cache != "east" || answer.Epoch != "epoch-1" || answer.Revision != written {
		t.Errorf("answer %+v, want cache east, epoch epoch-1, revision %d", answer, written)
	}
	// The core group is the resource alone; the wildcard is the highest.
	resp, body = get(t, srv, http.MethodGet, "shard=*&resource=configmaps")
	if err := json.Unmarshal(body, &answer); err != nil || resp.StatusCode != http.StatusOK || answer.Revision >= written {
		t.Errorf("configmaps of any shard: %d %s, want the floor, below %d", resp.StatusCode, body, written)
	}

	for _, tt := range []struct {
		method, query string
		code          int
		reason        metav1.StatusReason
	}{
		{http.MethodGet, "resource=configmaps", http.StatusBadRequest, metav1.StatusReasonBadRequest},
		{http.MethodGet, "shard=amber", http.StatusBadRequest, metav1.StatusReasonBadRequest},
		{http.MethodGet, "shard=amber&shard=blue&resource=configmaps", http.StatusBadRequest, metav1.StatusReasonBadRequest},
		{http.MethodGet, "shard=Amber!&resource=configmaps", http.StatusBadRequest, metav1.StatusReasonBadRequest},
		{http.MethodGet, "shard=amber&resource=" + url.QueryEscape("config/maps"), http.StatusBadRequest, metav1.StatusReasonBadRequest},
		{http.MethodGet, "shard=amber&resource=things:.example.com", http.StatusBadRequest, metav1.StatusReasonBadRequest},
		{http.MethodGet, "shard=amber&resource=things.Example_com", http.StatusBadRequest, metav1.StatusReasonBadRequest},
		{http.MethodGet, "shard=amber&resource=things:abc123.example.com", http.StatusOK, ""},
		// A shard homed elsewhere is not confirmed here; the wildcard is.
		{http.MethodGet, "shard=moved&resource=configmaps", http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable},
		{http.MethodGet, "shard=*&resource=configmaps", http.StatusOK, ""},
		{http.MethodPost, "shard=amber&resource=configmaps", http.StatusMethodNotAllowed, metav1.StatusReasonMethodNotAllowed},
	} {
		resp, body := get(t, srv, tt.method, tt.query)
		if resp.StatusCode != tt.code {
			t.Errorf("%s ?%s: %d %s, want %d", tt.method, tt.query, resp.StatusCode, body, tt.code)
			continue
		}
		if tt.reason == "" {
			continue
		}
		var status metav1.Status
		if err := json.Unmarshal(body, &status); err != nil || status.Kind != "Status" || status.Reason != tt.reason {
			t.Errorf("%s ?%s: body %s, want a Status with reason %s", tt.method, tt.query, body, tt.reason)
		}
	}
}

// A tracker that has not initialised makes the handler answer 503 at once.
func TestHandlerAnswersUnavailableBeforeTheTrackerIsReady(t *testing.T) {
	c := homerevision.StartEtcd(t)
	srv := httptest.NewServer(homerevision.Handler(homerevision.NewTracker(c, prefix), "east", func() string { return "e" }, nil, nil))
	defer srv.Close()
	resp, body := get(t, srv, http.MethodGet, "shard=amber&resource=configmaps")
	var status metav1.Status
	if err := json.Unmarshal(body, &status); err != nil || resp.StatusCode != http.StatusServiceUnavailable || status.Reason != metav1.StatusReasonServiceUnavailable {
		t.Errorf("before the tracker ran: %d %s, want 503 ServiceUnavailable", resp.StatusCode, body)
	}
}
