package dataplane

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/endpoints/request"
)

// serveWithInfo runs h on a request carrying info, as the default handler
// chain would.
func serveWithInfo(h http.Handler, info *request.RequestInfo) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodGet, "/apis/example.dev/v1/widgets", nil)
	req = req.WithContext(request.WithRequestInfo(req.Context(), info))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func TestUnknownTypesAreUnavailableUntilDeclarationsAreKnown(t *testing.T) {
	r := NewRegistry(Config{})
	delegated := 0
	h := r.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		delegated++
		w.WriteHeader(http.StatusNotFound)
	}))
	widgets := &request.RequestInfo{IsResourceRequest: true, Verb: "list", APIGroup: "example.dev", APIVersion: "v1", Resource: "widgets"}

	rec := serveWithInfo(h, widgets)
	if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" || delegated != 0 {
		t.Fatalf("before sync: %d, Retry-After %q, delegated %d; want 503 with Retry-After", rec.Code, rec.Header().Get("Retry-After"), delegated)
	}
	var status metav1.Status
	if err := json.Unmarshal(rec.Body.Bytes(), &status); err != nil || status.Reason != metav1.StatusReasonServiceUnavailable || status.Message == "" {
		t.Errorf("before sync: body %s is not a ServiceUnavailable Status (%v)", rec.Body.String(), err)
	}

	// The CRD API and non-resource paths are never held back.
	for _, info := range []*request.RequestInfo{
		{IsResourceRequest: true, Verb: "list", APIGroup: "apiextensions.k8s.io", APIVersion: "v1", Resource: "customresourcedefinitions"},
		{IsResourceRequest: false, Path: "/readyz"},
	} {
		if rec := serveWithInfo(h, info); rec.Code != http.StatusNotFound {
			t.Errorf("%+v was not delegated: %d", info, rec.Code)
		}
	}

	r.AddSource()()
	if rec := serveWithInfo(h, widgets); rec.Code != http.StatusNotFound {
		t.Errorf("after sync, an unknown type got %d, want the delegate's 404", rec.Code)
	}
}

func TestResourceFromCRDAndValidation(t *testing.T) {
	bad := []Resource{
		{Group: "g", Resource: "r", Singular: "s", Kind: "K", ListKind: "KList"},                                              // no versions
		{Group: "g", Resource: "r", Singular: "s", Kind: "K", ListKind: "KList", Versions: []string{"v1"}, Names: "anything"}, // unknown rule
		{Group: "g", Singular: "s", Kind: "K", ListKind: "KList", Versions: []string{"v1"}},                                   // no resource
	}
	for _, r := range bad {
		if err := r.Validate(); err == nil {
			t.Errorf("%+v validated", r)
		}
	}
	a := Resource{Group: "g", Resource: "r", Singular: "s", Kind: "K", ListKind: "KList", Versions: []string{"v1"}}
	b := a
	b.Versions = []string{"v1", "v2"}
	if !a.sameStorage(b) || a.equal(b) {
		t.Errorf("a version change must keep the storage and differ")
	}
	b.Names = PathSegmentNames
	if a.sameStorage(b) {
		t.Errorf("a name rule change must rebuild the storage")
	}
}
