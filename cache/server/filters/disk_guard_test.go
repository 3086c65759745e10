package filters

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/kubernetes/scheme"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

// guardedRequest runs method path through h in scope, as the chain does:
// the partition filter's scope and upstream's request info in the
// context.
func guardedRequest(t *testing.T, h http.Handler, scope kcpcache.Scope, method, path string) *httptest.ResponseRecorder {
	t.Helper()
	resolver := &request.RequestInfoFactory{APIPrefixes: sets.NewString("apis"), GrouplessAPIPrefixes: sets.NewString("api")}
	req := httptest.NewRequest(method, path, nil)
	info, err := resolver.NewRequestInfo(req)
	if err != nil {
		t.Fatal(err)
	}
	req = req.WithContext(request.WithRequestInfo(kcpcache.WithScope(req.Context(), scope), info))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func TestDiskGuardRefusesPartitionWritesOnlyWhileBelowTheMinimum(t *testing.T) {
	const minFree = 256 << 20
	var free uint64
	var freeErr error
	served := 0
	h := WithDiskGuard(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { served++ }), minFree,
		func() (uint64, error) { return free, freeErr }, scheme.Codecs)
	part := kcpcache.Scope{Shard: "amber", Cluster: "root"}
	const collection = "/apis/apis.kcp.io/v1alpha1/apiexports"

	free = minFree
	if rec := guardedRequest(t, h, part, http.MethodPost, collection); rec.Code != http.StatusOK || served != 1 {
		t.Fatalf("a create with exactly the minimum free: %d, served %d", rec.Code, served)
	}
	free = minFree - 1
	for _, r := range []struct{ method, path string }{
		{http.MethodPost, collection}, {http.MethodPut, collection + "/x"}, {http.MethodPatch, collection + "/x"},
		{http.MethodPut, collection + "/x/status"},
	} {
		rec := guardedRequest(t, h, part, r.method, r.path)
		var status metav1.Status
		if err := json.Unmarshal(rec.Body.Bytes(), &status); err != nil || rec.Code != http.StatusInsufficientStorage ||
			status.Code != http.StatusInsufficientStorage || status.Reason != ReasonInsufficientStorage {
			t.Errorf("%s %s below the minimum: %d %s, want 507 %s", r.method, r.path, rec.Code, rec.Body, ReasonInsufficientStorage)
			continue
		}
		if !strings.Contains(status.Message, "nothing was written") || !strings.Contains(status.Message, "255 MiB free") {
			t.Errorf("%s %s: message %q does not say that nothing was written and how much is free", r.method, r.path, status.Message)
		}
	}
	if served != 1 {
		t.Fatalf("a refused write reached the handler (served %d)", served)
	}
	// What goes on below the minimum: reads, deletes, the system
	// partition's writes (a start's CRDs), dry runs.
	for _, r := range []struct {
		scope        kcpcache.Scope
		method, path string
	}{
		{part, http.MethodGet, collection}, {part, http.MethodGet, collection + "/x"}, {part, http.MethodGet, collection + "?watch=true"},
		{part, http.MethodDelete, collection + "/x"}, {part, http.MethodDelete, collection},
		{kcpcache.SystemScope, http.MethodPost, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"},
		{kcpcache.SystemScope, http.MethodPut, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/x"},
		{part, http.MethodPost, collection + "?dryRun=All"},
		{part, http.MethodGet, "/readyz"},
	} {
		if rec := guardedRequest(t, h, r.scope, r.method, r.path); rec.Code != http.StatusOK {
			t.Errorf("%s %s in %s below the minimum: %d, want it served", r.method, r.path, r.scope, rec.Code)
		}
	}
	if served != 10 {
		t.Errorf("served %d requests, want 10", served)
	}
	// A free space that cannot be read does not stop the writes.
	freeErr = errors.New("statfs: no such file or directory")
	if rec := guardedRequest(t, h, part, http.MethodPost, collection); rec.Code != http.StatusOK {
		t.Errorf("a create when the free space cannot be read: %d, want it served", rec.Code)
	}
	freeErr, free = nil, minFree+1
	if rec := guardedRequest(t, h, part, http.MethodPost, collection); rec.Code != http.StatusOK {
		t.Errorf("a create once space is freed: %d, want it served", rec.Code)
	}
}

func TestDiskGuardOffServesEverything(t *testing.T) {
	next := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	h := WithDiskGuard(next, 0, func() (uint64, error) { t.Fatal("a guard that is off read the disk"); return 0, nil }, scheme.Codecs)
	if rec := guardedRequest(t, h, kcpcache.Scope{Shard: "amber", Cluster: "root"}, http.MethodPost, "/apis/apis.kcp.io/v1alpha1/apiexports"); rec.Code != http.StatusOK {
		t.Errorf("a create with the guard off: %d", rec.Code)
	}
}

func TestDiskSamplerReadsAtMostOncePerPeriod(t *testing.T) {
	now := time.Unix(1000, 0)
	reads := 0
	s := &DiskSampler{
		Directory: "/data",
		Statfs: func(dir string) (uint64, error) {
			if dir != "/data" {
				t.Errorf("read %q, want /data", dir)
			}
			reads++
			return uint64(reads), nil
		},
		Now: func() time.Time { return now },
	}
	for range 3 {
		if free, err := s.Free(); err != nil || free != 1 {
			t.Fatalf("Free = %d, %v; want the first reading, 1", free, err)
		}
	}
	now = now.Add(DiskSamplePeriod - time.Millisecond)
	if free, _ := s.Free(); free != 1 || reads != 1 {
		t.Fatalf("within the period: Free = %d after %d reads, want 1 after 1", free, reads)
	}
	now = now.Add(time.Millisecond)
	if free, _ := s.Free(); free != 2 || reads != 2 {
		t.Fatalf("a period on: Free = %d after %d reads, want 2 after 2", free, reads)
	}
}

func TestFreeDiskReadsTheFileSystem(t *testing.T) {
	free, err := FreeDisk(t.TempDir())
	if err != nil || free == 0 {
		t.Fatalf("FreeDisk of a temporary directory: %d, %v", free, err)
	}
	if _, err := FreeDisk("/does/not/exist"); err == nil {
		t.Error("FreeDisk of a missing directory: no error")
	}
}
