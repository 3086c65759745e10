package filters

import (
	"bytes"
	"encoding/json"
	"errors"
	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	apiextensionsapiserver "k8s.io/apiextensions-apiserver/pkg/apiserver"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apiserver/pkg/endpoints/request"
	sigsyaml "sigs.k8s.io/yaml"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/server/opaque"
	"github.com/kcp-cache/kcp-cache/cache/server/partition"
)

// FuzzCachePaths: whatever path a client sends, the partition filter
// answers 400 or hands the handler a request whose scope is valid and can
// never become a bad storage key segment; a path under
// /services/cache/shards is never served in the system partition, and the
// handler's path is the parsed API path. Never a 500.
func FuzzCachePaths(f *testing.F) {
	for _, p := range []string{
		"/services/cache/shards/alpha/clusters/root/apis/apis.kcp.io/v1alpha2/apiexports",
		"/services/cache/shards/*/clusters/*/apis/g/v1/ws",
		"/services/cache/shards/a/clusters/system:admin/api/v1",
		"/services/cache/shards/a/clusters/b",
		"/services/cache/shards//clusters/b/apis",
		"/services/cache/shards/../clusters/root/apis",
		"/services/cache/shards",
		"/services/cache/readyz",
		"/services/cache",
		"/services/cachex/shards/a/clusters/b",
		"/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
		"/",
	} {
		f.Add(p)
	}
	handler := WithPartition(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		scope, ok := kcpcache.ScopeFrom(req.Context())
		if !ok {
			http.Error(w, "no scope", http.StatusTeapot)
			return
		}
		w.Header().Set("X-Scope-Shard", scope.Shard)
		w.Header().Set("X-Scope-Cluster", scope.Cluster)
		w.Header().Set("X-Path", req.URL.Path)
	}), apiextensionsapiserver.Codecs)
	f.Fuzz(func(t *testing.T, path string) {
		parsed, err := CachePaths(path)
		rest, under := kcpcache.CutPathPrefix(path, kcpcache.ServicePrefix)
		_, shardsPath := kcpcache.CutPathPrefix(rest, "/"+kcpcache.ShardsSegment)
		switch {
		case err != nil:
			if !under || !shardsPath {
				t.Fatalf("%q refused (%v), but only paths under %s/shards can be", path, err, kcpcache.ServicePrefix)
			}
		case under && shardsPath && !parsed.Scoped:
			t.Fatalf("%q addresses a partition but was parsed as the system partition: %+v", path, parsed)
		case parsed.Scoped:
			for _, seg := range []string{parsed.Scope.Shard, parsed.Scope.Cluster} {
				if seg == "" || seg == "." || seg == ".." || strings.ContainsAny(seg, "/%\x00") {
					t.Fatalf("%q parsed into the key segment %q", path, seg)
				}
			}
			if err := parsed.Scope.Validate(); err != nil {
				t.Fatalf("%q parsed into an invalid scope %+v: %v", path, parsed.Scope, err)
			}
		case under && !strings.HasPrefix(parsed.APIPath, "/"):
			t.Fatalf("%q: system API path %q does not start with /", path, parsed.APIPath)
		}

		req := httptest.NewRequest(http.MethodGet, "/", nil).WithContext(t.Context())
		req.URL.Path = path
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, req)
		switch {
		case err != nil:
			if rec.Code != http.StatusBadRequest {
				t.Fatalf("%q: the filter answered %d %s, want 400 for %v", path, rec.Code, rec.Body, err)
			}
		case rec.Code != http.StatusOK:
			t.Fatalf("%q: the filter answered %d %s, want it passed on", path, rec.Code, rec.Body)
		default:
			want := kcpcache.SystemScope
			if parsed.Scoped {
				want = parsed.Scope
			}
			if got := (kcpcache.Scope{Shard: rec.Header().Get("X-Scope-Shard"), Cluster: rec.Header().Get("X-Scope-Cluster")}); got != want {
				t.Fatalf("%q: the handler saw scope %v, want %v", path, got, want)
			}
			if got := rec.Header().Get("X-Path"); got != parsed.APIPath {
				t.Fatalf("%q: the handler saw path %q, want %q", path, got, parsed.APIPath)
			}
		}
	})
}

// guardBodyTypes are the content types FuzzRequestGuardBody sends; the
// fuzzer picks one by index.
var guardBodyTypes = []string{
	"application/json",
	"application/merge-patch+json",
	"application/strategic-merge-patch+json",
	"application/yaml",
	"application/apply-patch+yaml",
	"application/json-patch+json",
	"application/json; charset=utf-8",
	"application/vnd.kubernetes.protobuf",
}

// FuzzRequestGuardBody: a write's body, of any content type the guard
// reads, is refused with a 4xx Status (never a 500) or passed on byte for
// byte; what passes reads the same to a case-insensitive decoder (Go's
// encoding/json, as a client may use) as to the server, in apiVersion,
// kind, name and the origin metadata the guard records, which is exactly
// what the body carries.
func FuzzRequestGuardBody(f *testing.F) {
	for _, s := range []struct {
		kind uint8
		body string
	}{
		{0, `{"apiVersion":"g/v1","kind":"W","metadata":{"name":"w","uid":"u","generation":4,"creationTimestamp":"2026-01-02T03:04:05Z"}}`},
		{0, `{"apiVersion":"g/v1","kind":"W","metadata":{"name":"w","UID":"other"}}`},
		{0, `{"kind":"W","Kind":"V"}`},
		{0, `{"metadata":{"managedFields":[{"manager":"m","operation":"Apply","apiVersion":"g/v1","fieldsType":"FieldsV1","fieldsV1":{}}]}}`},
		{0, `{"metadata":{"managedFields":[{}]}}`},
		{0, `{"metadata":{"generation":1e3}}`},
		{1, `{"metadata":{"labels":{"a":null}}}`},
		{3, "apiVersion: g/v1\nkind: W\nmetadata:\n  name: w\n"},
		{3, "Kind: W\nkind: V\n"},
		{4, "metadata: {Name: x}\n"},
		{5, `[{"op":"replace","path":"/metadata/Name","value":"x"}]`},
		{5, `[{"op":"add","path":"","value":{"KIND":"x"}}]`},
		{5, `[{"op":"replace","path":""}]`},
		{6, `{"metadata":{"name":"w"}}`},
		{7, "\x00\x01"},
	} {
		f.Add(s.kind, []byte(s.body))
	}
	const limit = 1 << 16
	f.Fuzz(func(t *testing.T, kind uint8, body []byte) {
		contentType := guardBodyTypes[int(kind)%len(guardBodyTypes)]
		req := httptest.NewRequest(http.MethodPost, "/apis/g/v1/ws", bytes.NewReader(body))
		req.Header.Set("Content-Type", contentType)
		info := &request.RequestInfo{IsResourceRequest: true, Verb: "create", APIGroup: "g", APIVersion: "v1", Resource: "ws"}
		out, err := withOriginMeta(req, info, limit)
		if err != nil {
			var status apierrors.APIStatus
			if !errors.As(err, &status) {
				t.Fatalf("%s body %q refused with %v, which is not a Status", contentType, body, err)
			}
			if code := status.Status().Code; code < 400 || code > 499 {
				t.Fatalf("%s body %q refused with %d, want a 4xx: %v", contentType, body, code, err)
			}
			return
		}
		passed, readErr := io.ReadAll(out.Body)
		if readErr != nil || !bytes.Equal(passed, body) {
			t.Fatalf("%s body %q passed on as %q (%v)", contentType, body, passed, readErr)
		}
		origin, hasOrigin := partition.OriginMetaFrom(out.Context())
		switch {
		case strings.HasPrefix(contentType, "application/json") && contentType != jsonPatchType,
			contentType == "application/merge-patch+json", contentType == "application/strategic-merge-patch+json":
			if !hasOrigin {
				t.Fatalf("%s body %q passed without origin metadata", contentType, body)
			}
			sameToEveryReader(t, body)
			var folded struct {
				Metadata struct {
					UID        string `json:"uid"`
					Generation int64  `json:"generation"`
				} `json:"metadata"`
			}
			if json.Unmarshal(body, &folded) == nil && (string(origin.UID) != folded.Metadata.UID || origin.Generation != folded.Metadata.Generation) {
				t.Fatalf("body %q: the guard recorded uid %q generation %d, encoding/json reads uid %q generation %d",
					body, origin.UID, origin.Generation, folded.Metadata.UID, folded.Metadata.Generation)
			}
		case contentType == "application/yaml", contentType == "application/apply-patch+yaml":
			j, err := sigsyaml.YAMLToJSON(body)
			if err != nil {
				t.Fatalf("%s body %q passed but is not YAML: %v", contentType, body, err)
			}
			sameToEveryReader(t, j)
		case contentType == jsonPatchType:
			if err := opaque.CheckJSONPatchKeys(body); err != nil {
				t.Fatalf("JSON patch %q passed but its keys are refused: %v", body, err)
			}
			// What passes reaches the library upstream's patch handler
			// applies it with: it may refuse the patch, never panic (a 500).
			if patch, err := jsonpatch.DecodePatch(body); err == nil {
				_, _ = patch.Apply([]byte(`{"apiVersion":"g/v1","kind":"W","metadata":{"name":"w"},"spec":{"a":[1]}}`))
			}
		default:
			if hasOrigin {
				t.Fatalf("%s body %q is not read, but origin metadata was recorded", contentType, body)
			}
		}
	})
}

// sameToEveryReader fails when a JSON object reads differently to Go's
// case-insensitive decoder and to a case-sensitive one in the members the
// server acts on.
func sameToEveryReader(t *testing.T, body []byte) {
	t.Helper()
	var exact map[string]json.RawMessage
	if json.Unmarshal(body, &exact) != nil {
		return
	}
	var folded struct {
		APIVersion json.RawMessage `json:"apiVersion"`
		Kind       json.RawMessage `json:"kind"`
		Metadata   json.RawMessage `json:"metadata"`
	}
	if json.Unmarshal(body, &folded) != nil {
		return
	}
	for name, got := range map[string]json.RawMessage{"apiVersion": folded.APIVersion, "kind": folded.Kind, "metadata": folded.Metadata} {
		if !bytes.Equal(bytes.TrimSpace(got), bytes.TrimSpace(exact[name])) {
			t.Fatalf("%s: a case-insensitive decoder reads %s, the server reads %s (body %s)", name, got, exact[name], body)
		}
	}
	var metaExact map[string]json.RawMessage
	if json.Unmarshal(exact["metadata"], &metaExact) != nil {
		return
	}
	var metaFolded struct {
		Name json.RawMessage `json:"name"`
		UID  json.RawMessage `json:"uid"`
	}
	if json.Unmarshal(exact["metadata"], &metaFolded) != nil {
		return
	}
	for name, got := range map[string]json.RawMessage{"name": metaFolded.Name, "uid": metaFolded.UID} {
		if !bytes.Equal(bytes.TrimSpace(got), bytes.TrimSpace(metaExact[name])) {
			t.Fatalf("metadata.%s: a case-insensitive decoder reads %s, the server reads %s (body %s)", name, got, metaExact[name], body)
		}
	}
}
