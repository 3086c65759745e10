package integration_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/server"
	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
)

// etcdState maps every key under the cache prefix to its mod revision.
func etcdState(t *testing.T, srv *cachetest.Server) map[string]int64 {
	t.Helper()
	resp, err := srv.EtcdClient().Get(context.Background(), srv.EtcdPrefix()+"/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, kv := range resp.Kvs {
		out[string(kv.Key)] = kv.ModRevision
	}
	return out
}

const exportsPath = "/apis/apis.kcp.io/v1alpha1/apiexports"

func TestBadInputIsRefusedAndNothingIsStored(t *testing.T) {
	t.Parallel()
	srv := cachetest.StartServer(t)
	ctx := testContext(t)
	existing, err := dyn(t, srv, "amber", "root").Resource(apiExports).Create(ctx, apiExport("existing", nil), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	scoped := func(shard, cluster, rest string) string {
		return kcpcache.ScopedPath(kcpcache.Scope{Shard: shard, Cluster: cluster}, rest)
	}
	body := func(annotations string) string {
		return fmt.Sprintf(`{"apiVersion":"apis.kcp.io/v1alpha1","kind":"APIExport","metadata":{"name":"new"%s}}`, annotations)
	}
	existingBody := fmt.Sprintf(`{"apiVersion":"apis.kcp.io/v1alpha1","kind":"APIExport","metadata":{"name":"existing","resourceVersion":%q,"annotations":{"kcp.io/shard":"blue"}}}`, existing.GetResourceVersion())
	large := fmt.Sprintf(`{"apiVersion":"apis.kcp.io/v1alpha1","kind":"APIExport","metadata":{"name":"large"},"spec":{"blob":%q}}`, strings.Repeat("x", 2*1024*1024))
	huge := fmt.Sprintf(`{"apiVersion":"apis.kcp.io/v1alpha1","kind":"APIExport","metadata":{"name":"huge"},"spec":{"blob":%q}}`, strings.Repeat("x", 4*1024*1024))

	checkBadRequests(t, srv, []badRequest{
		{"create through */*", "POST", scoped("*", "*", exportsPath), "", body(""), 405, metav1.StatusReasonMethodNotAllowed},
		{"create through amber/*", "POST", scoped("amber", "*", exportsPath), "", body(""), 405, metav1.StatusReasonMethodNotAllowed},
		{"create through */root", "POST", scoped("*", "root", exportsPath), "", body(""), 405, metav1.StatusReasonMethodNotAllowed},
		{"update through */root", "PUT", scoped("*", "root", exportsPath+"/existing"), "", existingBody, 405, metav1.StatusReasonMethodNotAllowed},
		{"patch through */*", "PATCH", scoped("*", "*", exportsPath+"/existing"), "application/merge-patch+json", `{"spec":{"a":1}}`, 405, metav1.StatusReasonMethodNotAllowed},
		{"delete through */*", "DELETE", scoped("*", "*", exportsPath+"/existing"), "", "", 405, metav1.StatusReasonMethodNotAllowed},
		{"deletecollection through amber/*", "DELETE", scoped("amber", "*", exportsPath), "", "", 405, metav1.StatusReasonMethodNotAllowed},
		{"get by name through */*", "GET", scoped("*", "*", exportsPath+"/existing"), "", "", 400, metav1.StatusReasonBadRequest},
		{"watch-list through */*", "GET", scoped("*", "*", exportsPath) + "?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true", "", "", 400, metav1.StatusReasonBadRequest},
		{"empty shard", "POST", "/services/cache/shards//clusters/root" + exportsPath, "", body(""), 400, metav1.StatusReasonBadRequest},
		{"upper-case shard", "POST", "/services/cache/shards/Amber/clusters/root" + exportsPath, "", body(""), 400, metav1.StatusReasonBadRequest},
		{"shard with a dot", "POST", "/services/cache/shards/a.b/clusters/root" + exportsPath, "", body(""), 400, metav1.StatusReasonBadRequest},
		{"cluster as a workspace path", "POST", "/services/cache/shards/amber/clusters/root:org" + exportsPath, "", body(""), 400, metav1.StatusReasonBadRequest},
		{"half a scope", "GET", "/services/cache/shards/amber" + exportsPath, "", "", 400, metav1.StatusReasonBadRequest},
		{"mismatched shard annotation", "POST", scoped("amber", "root", exportsPath), "", body(`,"annotations":{"kcp.io/shard":"blue"}`), 400, metav1.StatusReasonBadRequest},
		{"mismatched cluster annotation", "POST", scoped("amber", "root", exportsPath), "", body(`,"annotations":{"kcp.io/cluster":"org1"}`), 400, metav1.StatusReasonBadRequest},
		{"mismatched annotation on update", "PUT", scoped("amber", "root", exportsPath+"/existing"), "", existingBody, 400, metav1.StatusReasonBadRequest},
		{"missing kind", "POST", scoped("amber", "root", exportsPath), "", `{"apiVersion":"apis.kcp.io/v1alpha1","metadata":{"name":"new"}}`, 400, metav1.StatusReasonBadRequest},
		{"missing apiVersion", "POST", scoped("amber", "root", exportsPath), "", `{"kind":"APIExport","metadata":{"name":"new"}}`, 400, metav1.StatusReasonBadRequest},
		{"wrong kind", "POST", scoped("amber", "root", exportsPath), "", `{"apiVersion":"apis.kcp.io/v1alpha1","kind":"APIResourceSchema","metadata":{"name":"new"}}`, 422, metav1.StatusReasonInvalid},
		{"missing name", "POST", scoped("amber", "root", exportsPath), "", `{"apiVersion":"apis.kcp.io/v1alpha1","kind":"APIExport","metadata":{}}`, 422, metav1.StatusReasonInvalid},
		{"malformed JSON", "POST", scoped("amber", "root", exportsPath), "", `{"apiVersion": "apis.kcp.io/v1alpha1", "kind":`, 400, metav1.StatusReasonBadRequest},
		{"JSON that is not an object", "POST", scoped("amber", "root", exportsPath), "", `["a"]`, 400, metav1.StatusReasonBadRequest},
		{"body over the size limit", "POST", scoped("amber", "root", exportsPath), "", huge, 413, metav1.StatusReasonRequestEntityTooLarge},
		{"body over what etcd stores", "POST", scoped("amber", "root", exportsPath), "", large, 413, metav1.StatusReasonRequestEntityTooLarge},
		{"protobuf body", "POST", scoped("amber", "root", exportsPath), "application/vnd.kubernetes.protobuf", "k8s\x00garbage\xff", 415, metav1.StatusReasonUnsupportedMediaType},
		{"JSON patch replacing the object with no value", "PATCH", scoped("amber", "root", exportsPath+"/existing"), "application/json-patch+json", `[{"op":"replace","path":""}]`, 400, metav1.StatusReasonBadRequest},
		{"JSON patch adding with no value", "PATCH", scoped("amber", "root", exportsPath+"/existing"), "application/json-patch+json", `[{"op":"add","path":""}]`, 400, metav1.StatusReasonBadRequest},
		{"JSON patch testing with no value", "PATCH", scoped("amber", "root", exportsPath+"/existing"), "application/json-patch+json", `[{"op":"test","path":"/spec"}]`, 400, metav1.StatusReasonBadRequest},
		{"delete a bootstrapped CRD", "DELETE", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/apiexports.apis.kcp.io", "", "", 403, metav1.StatusReasonForbidden},
		{"deletecollection of CRDs", "DELETE", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", "", "", 405, metav1.StatusReasonMethodNotAllowed},
	})
}

// badRequest is a request the server must answer with a Status of wantCode
// and wantReason, changing nothing in etcd.
// noContentType as a badRequest's contentType sends no Content-Type
// header; "" sends JSON's.
const noContentType = "none"

type badRequest struct {
	name, method, path, contentType, body string
	wantCode                              int
	wantReason                            metav1.StatusReason
}

// checkBadRequests sends each request to srv as its admin and compares the
// answer and every etcd key before and after.
func checkBadRequests(t *testing.T, srv *cachetest.Server, tests []badRequest) {
	t.Helper()
	ctx := testContext(t)
	client, err := rest.HTTPClientFor(srv.Config())
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := etcdState(t, srv)
			var b []byte
			if tt.body != "" {
				b = []byte(tt.body)
			}
			req, err := newRequest(ctx, tt.method, srv.Config().Host+tt.path, b)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", "Bearer "+srv.Config().BearerToken)
			req.Header.Set("Accept", "application/json")
			switch ct := tt.contentType; ct {
			case "":
				req.Header.Set("Content-Type", "application/json")
			case noContentType:
			default:
				req.Header.Set("Content-Type", ct)
			}
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var status metav1.Status
			if err := json.NewDecoder(resp.Body).Decode(&status); err != nil {
				t.Fatalf("response (%d) is not a Status: %v", resp.StatusCode, err)
			}
			if resp.StatusCode != tt.wantCode || status.Reason != tt.wantReason || status.Kind != "Status" {
				t.Errorf("got %d %q (%s), want %d %q", resp.StatusCode, status.Reason, status.Message, tt.wantCode, tt.wantReason)
			}
			if status.Message == "" {
				t.Errorf("Status has no message")
			}
			after := etcdState(t, srv)
			if len(after) != len(before) {
				t.Errorf("etcd keys changed: %d before, %d after", len(before), len(after))
			}
			for k, rev := range before {
				if after[k] != rev {
					t.Errorf("%s was modified (revision %d -> %d)", k, rev, after[k])
				}
			}
		})
	}
}

func TestAnonymousRequestsReachOnlyHealthChecks(t *testing.T) {
	t.Parallel()
	srv := cachetest.StartServer(t)
	anonymous := rest.AnonymousClientConfig(srv.Config())
	client, err := rest.HTTPClientFor(anonymous)
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]int{
		"/readyz": 200,
		"/livez":  200,
		"/readyz/poststarthook/" + server.BootstrapHookName: 200,
		"/services/cache/readyz":                            200,
		"/metrics":                                          401,
		kcpcache.ScopedPath(kcpcache.Scope{Shard: "*", Cluster: "*"}, exportsPath): 401,
		"/apis": 401,
	} {
		resp, err := client.Get(anonymous.Host + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("anonymous GET %s = %d, want %d", path, resp.StatusCode, want)
		}
	}
}
