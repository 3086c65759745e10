package integration_test

import (
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
)

var (
	clusterRoles = schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"}
	roles        = schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "roles"}
)

// Every request whose shape a client got wrong (a path of the wrong scope,
// a key that differs from a known one only in case, a malformed parameter)
// is answered with a 4xx Status that says why, and changes nothing in etcd.
// One server for every row.
func TestRequestMistakesAnswer4xxAndStoreNothing(t *testing.T) {
	t.Parallel()
	srv := cachetest.StartServer(t)
	ctx := testContext(t)
	amber := dyn(t, srv, "amber", "root")
	if _, err := amber.Resource(clusterRoles).Create(ctx, newObject(clusterRoles, "ClusterRole", "", "existing", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := amber.Resource(roles).Namespace("default").Create(ctx, newObject(roles, "Role", "default", "existing", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	in := func(rest string) string {
		return kcpcache.ScopedPath(kcpcache.Scope{Shard: "amber", Cluster: "root"}, rest)
	}
	everywhere := func(rest string) string { return kcpcache.ScopedPath(kcpcache.Scope{Shard: "*", Cluster: "*"}, rest) }
	const (
		crs      = "/apis/rbac.authorization.k8s.io/v1/clusterroles"
		crsInNS  = "/apis/rbac.authorization.k8s.io/v1/namespaces/default/clusterroles"
		rolesAll = "/apis/rbac.authorization.k8s.io/v1/roles"
		rolesNS  = "/apis/rbac.authorization.k8s.io/v1/namespaces/default/roles"
		merge    = "application/merge-patch+json"
		jsonP    = "application/json-patch+json"
		smp      = "application/strategic-merge-patch+json"
		apply    = "application/apply-patch+yaml"
		yamlBody = "application/yaml"
	)
	// cr is a ClusterRole body; members are added after metadata, meta
	// inside it.
	cr := func(name, meta, members string) string {
		return fmt.Sprintf(`{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRole","metadata":{"name":%q%s}%s}`, name, meta, members)
	}
	role := cr("new", `,"namespace":"default"`, "")
	role = `{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"Role"` + role[len(`{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRole"`):]
	const beta = `{"annotations":{"kcp.io/shard":"beta"}}`
	const notFound, bad = metav1.StatusReasonNotFound, metav1.StatusReasonBadRequest

	checkBadRequests(t, srv, []badRequest{
		// A cluster-scoped type under a namespace path, every verb: 404,
		// as upstream (the path does not exist).
		{"cluster-scoped create under a namespace", "POST", in(crsInNS), "", cr("new", "", ""), 404, notFound},
		{"cluster-scoped get under a namespace", "GET", in(crsInNS + "/existing"), "", "", 404, notFound},
		{"cluster-scoped list under a namespace", "GET", in(crsInNS), "", "", 404, notFound},
		{"cluster-scoped watch under a namespace", "GET", in(crsInNS) + "?watch=true&timeoutSeconds=1", "", "", 404, notFound},
		{"cluster-scoped update under a namespace", "PUT", in(crsInNS + "/existing"), "", cr("existing", "", ""), 404, notFound},
		{"cluster-scoped merge patch under a namespace", "PATCH", in(crsInNS + "/existing"), merge, `{"metadata":{"labels":{"a":"b"}}}`, 404, notFound},
		{"cluster-scoped apply under a namespace", "PATCH", in(crsInNS+"/existing") + "?fieldManager=t", apply, cr("existing", "", ""), 404, notFound},
		{"cluster-scoped delete under a namespace", "DELETE", in(crsInNS + "/existing"), "", "", 404, notFound},
		{"cluster-scoped deletecollection under a namespace", "DELETE", in(crsInNS), "", "", 404, notFound},
		{"cluster-scoped status under a namespace", "PUT", in(crsInNS + "/existing/status"), "", cr("existing", "", ""), 404, notFound},
		{"cluster-scoped wildcard list under a namespace", "GET", everywhere(crsInNS), "", "", 404, notFound},
		{"cluster-scoped wildcard watch under a namespace", "GET", everywhere(crsInNS) + "?watch=true&timeoutSeconds=1", "", "", 404, notFound},
		{"apiexport create under a namespace", "POST", in("/apis/apis.kcp.io/v1alpha1/namespaces/default/apiexports"), "", `{"apiVersion":"apis.kcp.io/v1alpha1","kind":"APIExport","metadata":{"name":"new"}}`, 404, notFound},
		// A namespaced type without a namespace: only list and watch span
		// namespaces, as upstream.
		{"namespaced create without a namespace", "POST", in(rolesAll), "", role, 404, notFound},
		{"namespaced get without a namespace", "GET", in(rolesAll + "/existing"), "", "", 404, notFound},
		{"namespaced update without a namespace", "PUT", in(rolesAll + "/existing"), "", role, 404, notFound},
		{"namespaced patch without a namespace", "PATCH", in(rolesAll + "/existing"), merge, `{"metadata":{"labels":{"a":"b"}}}`, 404, notFound},
		{"namespaced delete without a namespace", "DELETE", in(rolesAll + "/existing"), "", "", 404, notFound},
		{"namespaced deletecollection without a namespace", "DELETE", in(rolesAll), "", "", 404, notFound},

		// Keys that differ from apiVersion, kind, metadata or a metadata
		// field only in case: Go's encoding/json would read them as the
		// real ones.
		{"create with Metadata", "POST", in(crs), "", cr("new", "", `,"Metadata":`+beta), 400, bad},
		{"create with KIND", "POST", in(crs), "", cr("new", "", `,"KIND":"APIExport"`), 400, bad},
		{"create with ApiVersion", "POST", in(crs), "", cr("new", "", `,"ApiVersion":"v1"`), 400, bad},
		{"create with a Kelvin-sign kind", "POST", in(crs), "", cr("new", "", `,"\u212aind":"APIExport"`), 400, bad},
		{"create with an escaped metadata", "POST", in(crs), "", cr("new", "", `,"\u006detadata":`+beta), 400, bad},
		{"create with metadata twice", "POST", in(crs), "", cr("new", "", `,"metadata":`+beta), 400, bad},
		{"create with metadata.Annotations", "POST", in(crs), "", cr("new", `,"Annotations":{"kcp.io/shard":"beta"}`, ""), 400, bad},
		{"create with metadata.Name", "POST", in(crs), "", cr("new", `,"Name":"other"`, ""), 400, bad},
		{"create with metadata.ResourceVersion", "POST", in(crs), "", cr("new", `,"ResourceVersion":"1"`, ""), 400, bad},
		{"create with Metadata without a Content-Type", "POST", in(crs), noContentType, cr("new", "", `,"Metadata":`+beta), 400, bad},
		{"update with metadata.Annotations without a Content-Type", "PUT", in(crs + "/existing"), noContentType, cr("existing", `,"Annotations":{"kcp.io/shard":"beta"}`, ""), 400, bad},
		{"create with Metadata as YAML", "POST", in(crs), yamlBody, "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: new\nMetadata:\n  annotations:\n    kcp.io/shard: beta\n", 400, bad},
		{"dry-run create with Metadata", "POST", in(crs) + "?dryRun=All", "", cr("new", "", `,"Metadata":`+beta), 400, bad},
		{"update with Metadata", "PUT", in(crs + "/existing"), "", cr("existing", "", `,"Metadata":`+beta), 400, bad},
		{"update with metadata.Annotations", "PUT", in(crs + "/existing"), "", cr("existing", `,"Annotations":{"kcp.io/shard":"beta"}`, ""), 400, bad},
		{"merge patch with Metadata", "PATCH", in(crs + "/existing"), merge, `{"Metadata":` + beta + `}`, 400, bad},
		{"merge patch with metadata.Annotations", "PATCH", in(crs + "/existing"), merge, `{"metadata":{"Annotations":{"kcp.io/shard":"beta"}}}`, 400, bad},
		{"strategic merge patch with Metadata", "PATCH", in(crs + "/existing"), smp, `{"Metadata":` + beta + `}`, 400, bad},
		{"JSON patch adding Metadata", "PATCH", in(crs + "/existing"), jsonP, `[{"op":"add","path":"/Metadata","value":` + beta + `}]`, 400, bad},
		{"JSON patch adding metadata.Annotations", "PATCH", in(crs + "/existing"), jsonP, `[{"op":"add","path":"/metadata/Annotations","value":{"kcp.io/shard":"beta"}}]`, 400, bad},
		{"JSON patch replacing metadata with Annotations", "PATCH", in(crs + "/existing"), jsonP, `[{"op":"replace","path":"/metadata","value":{"name":"existing","Annotations":{"kcp.io/shard":"beta"}}}]`, 400, bad},
		{"JSON patch copying into Metadata", "PATCH", in(crs + "/existing"), jsonP, `[{"op":"copy","from":"/metadata","path":"/Metadata"}]`, 400, bad},
		{"apply with Metadata", "PATCH", in(crs+"/existing") + "?fieldManager=t", apply, cr("existing", "", `,"Metadata":`+beta), 400, bad},
		{"apply with metadata.Annotations", "PATCH", in(crs+"/existing") + "?fieldManager=t", apply, cr("existing", `,"Annotations":{"kcp.io/shard":"beta"}`, ""), 400, bad},
		{"apply creating with Metadata", "PATCH", in(crs+"/new") + "?fieldManager=t", apply, cr("new", "", `,"Metadata":`+beta), 400, bad},

		// A dry run is refused as the real request is.
		{"dry-run create naming another shard", "POST", in(crs) + "?dryRun=All", "", cr("new", `,"annotations":{"kcp.io/shard":"beta"}`, ""), 400, bad},
		{"dry-run update naming another cluster", "PUT", in(crs+"/existing") + "?dryRun=All", "", cr("existing", `,"annotations":{"kcp.io/cluster":"org"}`, ""), 400, bad},
		{"dry-run merge patch naming another shard", "PATCH", in(crs+"/existing") + "?dryRun=All", merge, `{"metadata":` + beta + `}`, 400, bad},
		{"dry-run JSON patch naming another shard", "PATCH", in(crs+"/existing") + "?dryRun=All", jsonP, `[{"op":"add","path":"/metadata/annotations","value":{"kcp.io/shard":"beta"}}]`, 400, bad},
		{"dry-run apply naming another shard", "PATCH", in(crs+"/existing") + "?dryRun=All&fieldManager=t&force=true", apply, cr("existing", `,"annotations":{"kcp.io/shard":"beta"}`, ""), 400, bad},
		{"dry-run CRD create naming a shard", "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions?dryRun=All", "", `{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition","metadata":{"name":"gizmos.example.dev","annotations":{"kcp.io/shard":"beta"}},"spec":{"group":"example.dev","scope":"Cluster","names":{"plural":"gizmos","kind":"Gizmo"},"versions":[{"name":"v1","served":true,"storage":true,"schema":{"openAPIV3Schema":{"type":"object"}}}]}}`, 400, bad},

		// Client mistakes upstream answers with 500.
		{"create with metadata.resourceVersion", "POST", in(crs), "", cr("new", `,"resourceVersion":"5"`, ""), 400, bad},
		{"dry-run create with metadata.resourceVersion", "POST", in(crs) + "?dryRun=All", "", cr("new", `,"resourceVersion":"5"`, ""), 400, bad},
		{"watch from resourceVersion abc", "GET", in(crs) + "?watch=true&resourceVersion=abc&timeoutSeconds=1", "", "", 400, bad},
		{"wildcard watch from resourceVersion abc", "GET", everywhere(crs) + "?watch=true&resourceVersion=abc&timeoutSeconds=1", "", "", 400, bad},
		{"list at resourceVersion abc", "GET", in(crs) + "?resourceVersion=abc", "", "", 400, bad},
		{"wildcard list at resourceVersion abc", "GET", everywhere(crs) + "?resourceVersion=abc", "", "", 400, bad},
		{"get at resourceVersion abc", "GET", in(crs+"/existing") + "?resourceVersion=abc", "", "", 400, bad},
		{"deletecollection at resourceVersion abc", "DELETE", in(crs) + "?resourceVersion=abc", "", "", 400, bad},
		{"merge patch setting resourceVersion abc", "PATCH", in(crs + "/existing"), merge, `{"metadata":{"resourceVersion":"abc"}}`, 400, bad},
		{"list with a bad continue token", "GET", in(crs) + "?limit=1&continue=abc", "", "", 400, bad},
		{"wildcard list with a bad continue token", "GET", everywhere(crs) + "?limit=1&continue=abc", "", "", 400, bad},
		{"list with resourceVersionMatch and no resourceVersion", "GET", in(crs) + "?resourceVersionMatch=Exact", "", "", 422, metav1.StatusReasonInvalid},
		{"list with an unknown resourceVersionMatch", "GET", in(crs) + "?resourceVersionMatch=Sometimes&resourceVersion=1", "", "", 422, metav1.StatusReasonInvalid},
		{"list with a bad label selector", "GET", in(crs) + "?labelSelector=a+in+(", "", "", 400, bad},
		{"list with an unsupported field selector", "GET", in(crs) + "?fieldSelector=spec.x%3D1", "", "", 400, bad},
		{"list with a bad timeout", "GET", in(crs) + "?timeoutSeconds=abc", "", "", 400, bad},
		{"update with resourceVersion abc", "PUT", in(crs + "/existing"), "", cr("existing", `,"resourceVersion":"abc"`, ""), 400, bad},
		{"delete with a precondition resourceVersion abc", "DELETE", in(crs + "/existing"), "", `{"kind":"DeleteOptions","apiVersion":"v1","preconditions":{"resourceVersion":"abc"}}`, 409, metav1.StatusReasonConflict},
		{"create with an unknown dryRun", "POST", in(crs) + "?dryRun=Maybe", "", cr("new", "", ""), 422, metav1.StatusReasonInvalid},
		{"delete with an unknown propagationPolicy", "DELETE", in(crs+"/existing") + "?propagationPolicy=Sometimes", "", "", 422, metav1.StatusReasonInvalid},
	})
}
