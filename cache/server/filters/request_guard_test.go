package filters

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	apiextensionsapiserver "k8s.io/apiextensions-apiserver/pkg/apiserver"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/endpoints/request"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/server/authorization"
	"github.com/kcp-cache/kcp-cache/cache/server/partition"
)

// What the request guard refuses before storage, and what it hands the
// handler: the body as sent, and a pushed copy's origin metadata.
func TestRequestGuardRefusesWhatMustNotReachStorage(t *testing.T) {
	partitionScope := kcpcache.Scope{Shard: "amber", Cluster: "root"}
	wildcard := kcpcache.Scope{Shard: kcpcache.Wildcard, Cluster: "root"}
	crds := authorization.CRDResource
	const pushed = `{"apiVersion":"g/v1","kind":"W","metadata":{"name":"w","uid":"origin-uid","generation":4,"creationTimestamp":"2026-01-02T03:04:05Z"}}`
	tests := []struct {
		name        string
		verb        string
		group       string
		resource    string
		subresource string
		scope       *kcpcache.Scope // nil: no scope in the context
		nonResource bool
		path        string
		contentType string
		body        string

		wantCode   int    // 0: passed to the handler
		wantReason string // of the refusal's Status
		wantOrigin *partition.OriginMeta
		wantCheck  string // the CRD deletion check asked, as "verb name"
	}{
		{name: "a non-resource request passes", verb: "get", nonResource: true, scope: &partitionScope},
		{name: "a request without a scope passes", verb: "create", group: "g", resource: "ws", body: pushed, contentType: "application/json"},
		{name: "a wildcard list passes", verb: "list", group: "g", resource: "ws", scope: &wildcard},
		{name: "a wildcard watch passes", verb: "watch", group: "g", resource: "ws", scope: &wildcard},
		{name: "a wildcard watch-list is refused", verb: "watch", group: "g", resource: "ws", scope: &wildcard, path: "/apis/g/v1/ws?watch=true&sendInitialEvents=true", wantCode: http.StatusBadRequest, wantReason: "BadRequest"},
		{name: "a wildcard get is refused", verb: "get", group: "g", resource: "ws", scope: &wildcard, wantCode: http.StatusBadRequest, wantReason: "BadRequest"},
		{name: "a wildcard create is refused", verb: "create", group: "g", resource: "ws", scope: &wildcard, body: pushed, contentType: "application/json", wantCode: http.StatusMethodNotAllowed, wantReason: "MethodNotAllowed"},
		{name: "a wildcard deletecollection is refused", verb: "deletecollection", group: "g", resource: "ws", scope: &wildcard, wantCode: http.StatusMethodNotAllowed, wantReason: "MethodNotAllowed"},
		{name: "a CRD deletion is checked", verb: "delete", group: crds.Group, resource: crds.Resource, scope: &kcpcache.SystemScope, wantCode: http.StatusConflict, wantReason: "Conflict", wantCheck: "delete ws.g"},
		{name: "a CRD deletecollection is checked", verb: "deletecollection", group: crds.Group, resource: crds.Resource, scope: &kcpcache.SystemScope, wantCode: http.StatusConflict, wantReason: "Conflict", wantCheck: "deletecollection "},
		{name: "a CRD read is not checked", verb: "get", group: crds.Group, resource: crds.Resource, scope: &kcpcache.SystemScope},
		{name: "a pushed create carries its origin", verb: "create", group: "g", resource: "ws", scope: &partitionScope, body: pushed, contentType: "application/json",
			wantOrigin: &partition.OriginMeta{UID: types.UID("origin-uid"), Generation: 4}},
		{name: "a merge patch carries its origin", verb: "patch", group: "g", resource: "ws", scope: &partitionScope, body: pushed, contentType: "application/merge-patch+json",
			wantOrigin: &partition.OriginMeta{UID: types.UID("origin-uid"), Generation: 4}},
		{name: "a body over the limit is refused", verb: "update", group: "g", resource: "ws", scope: &partitionScope, body: `{"metadata":{"name":"` + strings.Repeat("x", 200) + `"}}`, contentType: "application/json",
			wantCode: http.StatusRequestEntityTooLarge, wantReason: "RequestEntityTooLarge"},
		{name: "a body that is not JSON is refused", verb: "create", group: "g", resource: "ws", scope: &partitionScope, body: `{"metadata":`, contentType: "application/json",
			wantCode: http.StatusBadRequest, wantReason: "BadRequest"},
		{name: "a YAML body passes untouched", verb: "create", group: "g", resource: "ws", scope: &partitionScope, body: "metadata:\n  name: w\n", contentType: "application/yaml"},
		{name: "a write in the system partition is not parsed", verb: "create", group: "g", resource: "ws", scope: &kcpcache.SystemScope, body: `{"metadata":`, contentType: "application/json"},
		{name: "a subresource write is not parsed", verb: "update", group: "g", resource: "ws", subresource: "status", scope: &partitionScope, body: `{"metadata":`, contentType: "application/json"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var asked string
			cfg := GuardConfig{
				Codecs:              apiextensionsapiserver.Codecs,
				MaxRequestBodyBytes: 160,
				CheckCRDDeletion: func(_ context.Context, verb, name string) error {
					asked = verb + " " + name
					return apierrors.NewConflict(crds, name, io.EOF)
				},
			}
			var reached bool
			var gotBody string
			var gotOrigin *partition.OriginMeta
			handler := http.HandlerFunc(func(_ http.ResponseWriter, req *http.Request) {
				reached = true
				b, _ := io.ReadAll(req.Body)
				gotBody = string(b)
				if m, ok := partition.OriginMetaFrom(req.Context()); ok {
					gotOrigin = &m
				}
			})
			path := tt.path
			if path == "" {
				path = "/apis/" + tt.group + "/v1/" + tt.resource
			}
			req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(tt.body))
			if tt.contentType != "" {
				req.Header.Set("Content-Type", tt.contentType)
			}
			name := ""
			if tt.verb == "delete" || tt.verb == "get" {
				name = "ws.g"
			}
			ctx := request.WithRequestInfo(req.Context(), &request.RequestInfo{
				IsResourceRequest: !tt.nonResource, Verb: tt.verb, APIGroup: tt.group, APIVersion: "v1",
				Resource: tt.resource, Subresource: tt.subresource, Name: name,
			})
			if tt.scope != nil {
				ctx = kcpcache.WithScope(ctx, *tt.scope)
			}
			rec := httptest.NewRecorder()
			WithRequestGuard(handler, cfg).ServeHTTP(rec, req.WithContext(ctx))

			if asked != tt.wantCheck {
				t.Errorf("CRD deletion check asked %q, want %q", asked, tt.wantCheck)
			}
			if tt.wantCode != 0 {
				if reached || rec.Code != tt.wantCode || !strings.Contains(rec.Body.String(), `"reason":"`+tt.wantReason+`"`) {
					t.Fatalf("reached the handler: %v; answer %d %s, want %d with reason %s", reached, rec.Code, rec.Body, tt.wantCode, tt.wantReason)
				}
				return
			}
			if !reached {
				t.Fatalf("refused with %d %s, want it passed", rec.Code, rec.Body)
			}
			if gotBody != tt.body {
				t.Errorf("the handler read %q, want the body as sent, %q", gotBody, tt.body)
			}
			switch {
			case tt.wantOrigin == nil && gotOrigin != nil:
				t.Errorf("origin metadata %+v in the context, want none", *gotOrigin)
			case tt.wantOrigin != nil && gotOrigin == nil:
				t.Errorf("no origin metadata in the context, want %+v", *tt.wantOrigin)
			case tt.wantOrigin != nil && (gotOrigin.UID != tt.wantOrigin.UID || gotOrigin.Generation != tt.wantOrigin.Generation || gotOrigin.CreationTimestamp.UTC().Format("2006-01-02T15:04:05Z") != "2026-01-02T03:04:05Z"):
				t.Errorf("origin metadata %+v, want uid %s, generation %d, created 2026-01-02T03:04:05Z", *gotOrigin, tt.wantOrigin.UID, tt.wantOrigin.Generation)
			}
		})
	}
}
