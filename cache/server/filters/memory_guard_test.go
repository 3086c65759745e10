package filters

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/kubernetes/scheme"
)

func TestMemoryGuardRefusesCreatesOnlyWhileFull(t *testing.T) {
	var live uint64
	served := 0
	h := WithMemoryGuard(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { served++ }), 100<<20, func() uint64 { return live }, scheme.Codecs)
	resolver := &request.RequestInfoFactory{APIPrefixes: sets.NewString("apis"), GrouplessAPIPrefixes: sets.NewString("api")}
	do := func(method, path string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(method, path, nil)
		info, err := resolver.NewRequestInfo(req)
		if err != nil {
			t.Fatal(err)
		}
		req = req.WithContext(request.WithRequestInfo(req.Context(), info))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	const collection = "/apis/apis.kcp.io/v1alpha1/apiexports"
	live = 99 << 20
	if rec := do(http.MethodPost, collection); rec.Code != http.StatusOK || served != 1 {
		t.Fatalf("a create below the limit: %d, served %d", rec.Code, served)
	}
	live = 100 << 20
	rec := do(http.MethodPost, collection)
	var status metav1.Status
	if err := json.Unmarshal(rec.Body.Bytes(), &status); err != nil || rec.Code != http.StatusInsufficientStorage || status.Reason != ReasonInsufficientStorage || status.Code != http.StatusInsufficientStorage {
		t.Fatalf("a create at the limit: %d %s, want 507 %s", rec.Code, rec.Body, ReasonInsufficientStorage)
	}
	if served != 1 {
		t.Fatalf("the refused create reached the handler")
	}
	for _, r := range []struct{ method, path string }{
		{http.MethodGet, collection}, {http.MethodGet, collection + "/x"}, {http.MethodPut, collection + "/x"},
		{http.MethodPatch, collection + "/x"}, {http.MethodDelete, collection + "/x"}, {http.MethodDelete, collection},
	} {
		if rec := do(r.method, r.path); rec.Code != http.StatusOK {
			t.Errorf("%s %s while full: %d, want it served", r.method, r.path, rec.Code)
		}
	}
	if served != 7 {
		t.Errorf("served %d requests, want 7", served)
	}
}
