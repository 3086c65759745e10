package integration_test

import (
	"encoding/json"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"k8s.io/client-go/rest"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
)

// send makes one request as srv's admin and returns the code and the
// decoded answer.
func send(t *testing.T, srv *cachetest.Server, method, path, contentType, body string) (int, map[string]interface{}) {
	t.Helper()
	client, err := rest.HTTPClientFor(srv.Config())
	if err != nil {
		t.Fatal(err)
	}
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(testContext(t), method, srv.Config().Host+path, r)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+srv.Config().BearerToken)
	req.Header.Set("Accept", "application/json")
	if contentType == "" {
		contentType = "application/json"
	}
	req.Header.Set("Content-Type", contentType)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]interface{}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatalf("%s %s: %d, answer is not JSON: %v", method, path, resp.StatusCode, err)
	}
	return resp.StatusCode, out
}

// comparable drops what differs between any two writes of one object: the
// resourceVersion (a dry run has none) and the times of managedFields
// entries a server-side apply records.
func comparable(obj map[string]interface{}) map[string]interface{} {
	m, _ := obj["metadata"].(map[string]interface{})
	delete(m, "resourceVersion")
	entries, _ := m["managedFields"].([]interface{})
	for _, e := range entries {
		delete(e.(map[string]interface{}), "time")
	}
	return obj
}

// A dry run answers exactly what the real request answers (but the
// resourceVersion), and stores nothing: the partition annotations, a copy's
// origin uid, creationTimestamp, generation and managedFields, in a
// partition and, for CRDs, in the system partition.
func TestDryRunAnswersAsTheRealRequest(t *testing.T) {
	t.Parallel()
	srv := cachetest.StartServer(t)
	in := func(rest string) string {
		return kcpcache.ScopedPath(kcpcache.Scope{Shard: "amber", Cluster: "root"}, rest)
	}
	const crs = "/apis/rbac.authorization.k8s.io/v1/clusterroles"
	const crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
	// A copy as kcp's replication sends it: the origin's identity and field
	// ownership.
	const copyBody = `{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRole","metadata":{"name":"copy",` +
		`"uid":"5b0f4c4e-1d52-4b1e-9d7a-3d0c1b2a9e01","creationTimestamp":"2025-01-02T03:04:05Z","generation":7,` +
		`"managedFields":[{"manager":"origin","operation":"Update","apiVersion":"rbac.authorization.k8s.io/v1","time":"2025-01-02T03:04:05Z","fieldsType":"FieldsV1","fieldsV1":{"f:rules":{}}}]},` +
		`"rules":[{"verbs":["get"],"apiGroups":[""],"resources":["pods"]}]}`
	const plainBody = `{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRole","metadata":{"name":"plain","uid":"5b0f4c4e-1d52-4b1e-9d7a-3d0c1b2a9e02","creationTimestamp":"2025-01-02T03:04:05Z"}}`
	const crdBody = `{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition","metadata":{"name":"gizmos.dryrun.example.dev"},` +
		`"spec":{"group":"dryrun.example.dev","scope":"Cluster","names":{"plural":"gizmos","singular":"gizmo","kind":"Gizmo","listKind":"GizmoList"},` +
		`"versions":[{"name":"v1","served":true,"storage":true,"schema":{"openAPIV3Schema":{"type":"object","x-kubernetes-preserve-unknown-fields":true}}}]}}`

	// Each step is sent with ?dryRun=All first, then for real; both answers
	// must agree. The real one prepares the next step.
	steps := []struct {
		name, method, path, contentType, body string
		ignore                                []string // metadata fields a dry run cannot know (a new uid, the time)
	}{
		{name: "create of a copy", method: "POST", path: in(crs), body: copyBody},
		{name: "create without managedFields", method: "POST", path: in(crs), body: plainBody},
		{name: "update of a copy", method: "PUT", path: in(crs + "/copy"), body: strings.Replace(strings.Replace(copyBody, `"generation":7`, `"generation":8`, 1), `"verbs":["get"]`, `"verbs":["get","list"]`, 1)},
		{name: "merge patch", method: "PATCH", path: in(crs + "/copy"), contentType: "application/merge-patch+json", body: `{"metadata":{"generation":9,"labels":{"a":"b"}}}`},
		// A copy's generation is the origin's, also when lower than the
		// stored one (which upstream's validation refuses).
		{name: "update lowering the generation", method: "PUT", path: in(crs + "/copy"), body: strings.Replace(copyBody, `"generation":7`, `"generation":3`, 1)},
		{name: "JSON patch", method: "PATCH", path: in(crs + "/copy"), contentType: "application/json-patch+json", body: `[{"op":"add","path":"/metadata/labels","value":{"c":"d"}}]`},
		{name: "apply", method: "PATCH", path: in(crs+"/copy") + "?fieldManager=applier&force=true", contentType: "application/apply-patch+yaml", body: `{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRole","metadata":{"name":"copy","labels":{"e":"f"}}}`},
		{name: "apply creating", method: "PATCH", path: in(crs+"/applied") + "?fieldManager=applier", contentType: "application/apply-patch+yaml", body: `{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRole","metadata":{"name":"applied"}}`, ignore: []string{"uid", "creationTimestamp"}},
		{name: "create of a CRD", method: "POST", path: crds, body: crdBody, ignore: []string{"uid", "creationTimestamp"}},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			sep := "?"
			if strings.Contains(s.path, "?") {
				sep = "&"
			}
			before := etcdState(t, srv)
			dryCode, dry := send(t, srv, s.method, s.path+sep+"dryRun=All", s.contentType, s.body)
			if after := etcdState(t, srv); !reflect.DeepEqual(before, after) {
				t.Errorf("the dry run changed etcd:\nbefore %v\nafter  %v", before, after)
			}
			realCode, real := send(t, srv, s.method, s.path, s.contentType, s.body)
			if dryCode != realCode {
				t.Fatalf("dry run answered %d, the real request %d (%v)", dryCode, realCode, dry)
			}
			if realCode >= 300 {
				t.Fatalf("the real request failed: %d %v", realCode, real)
			}
			a, _ := real["metadata"].(map[string]interface{})["annotations"].(map[string]interface{})
			if a[kcpcache.AnnotationShard] == nil || a[kcpcache.AnnotationCluster] == nil {
				t.Errorf("the real answer has no partition annotations: %v", a)
			}
			for _, f := range s.ignore {
				delete(dry["metadata"].(map[string]interface{}), f)
				delete(real["metadata"].(map[string]interface{}), f)
			}
			if d, r := comparable(dry), comparable(real); !reflect.DeepEqual(d, r) {
				dj, _ := json.Marshal(d)
				rj, _ := json.Marshal(r)
				t.Errorf("dry run and real request answer differently:\ndry  %s\nreal %s", dj, rj)
			}
		})
	}
}
