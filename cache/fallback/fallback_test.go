package fallback_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/dynamic"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/fallback"
	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
)

// The workspaces of the test, as kcp's front-proxy index would resolve them:
// path → logical cluster name, all on shard "root".
var workspaces = map[string]string{
	"root":      "root",
	"root:orga": "orgacluster",
	"root:orgb": "orgbcluster",
	"root:orgc": "orgccluster", // not marked: nothing of it is in the cache
	"root:orgd": "orgdcluster", // workspaces bound from an export whose policy allows only vip
	"root:orge": "orgecluster", // workspaces bound from an export the cache does not hold
}

const (
	lostShard     = "root"
	unmarkedShard = "beta" // has data but no heartbeat
)

var (
	gvrWorkspaces   = schema.GroupVersionResource{Group: "tenancy.kcp.io", Version: "v1alpha1", Resource: "workspaces"}
	gvrLogical      = schema.GroupVersionResource{Group: "core.kcp.io", Version: "v1alpha1", Resource: "logicalclusters"}
	gvrBindings     = schema.GroupVersionResource{Group: "apis.kcp.io", Version: "v1alpha2", Resource: "apibindings"}
	gvrExports      = schema.GroupVersionResource{Group: "apis.kcp.io", Version: "v1alpha2", Resource: "apiexports"}
	gvrClusterRoles = schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"}
	gvrCRBs         = schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterrolebindings"}
	gvrRoles        = schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "roles"}
	gvrRoleBindings = schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "rolebindings"}
	gvrHeartbeats   = kcpcache.HeartbeatResource
)

func obj(gvr schema.GroupVersionResource, kind, namespace, name string, fields map[string]any) *unstructured.Unstructured {
	o := map[string]any{"apiVersion": gvr.GroupVersion().String(), "kind": kind, "metadata": map[string]any{"name": name}}
	if namespace != "" {
		o["metadata"].(map[string]any)["namespace"] = namespace
	}
	for k, v := range fields {
		o[k] = v
	}
	return &unstructured.Unstructured{Object: o}
}

func rule(verbs, groups, resources []string) map[string]any {
	return map[string]any{"verbs": toAny(verbs), "apiGroups": toAny(groups), "resources": toAny(resources)}
}

func urlRule(verbs, urls []string) map[string]any {
	return map[string]any{"verbs": toAny(verbs), "nonResourceURLs": toAny(urls)}
}

func toAny(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}

func clusterRole(name string, rules ...map[string]any) *unstructured.Unstructured {
	rs := make([]any, len(rules))
	for i, r := range rules {
		rs[i] = r
	}
	return obj(gvrClusterRoles, "ClusterRole", "", name, map[string]any{"rules": rs})
}

func subject(kind, name string) map[string]any {
	return map[string]any{"kind": kind, "name": name, "apiGroup": "rbac.authorization.k8s.io"}
}

func binding(gvr schema.GroupVersionResource, kind, namespace, name, roleKind, role string, subjects ...map[string]any) *unstructured.Unstructured {
	ss := make([]any, len(subjects))
	for i, s := range subjects {
		ss[i] = s
	}
	return obj(gvr, kind, namespace, name, map[string]any{
		"roleRef":  map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": roleKind, "name": role},
		"subjects": ss,
	})
}

func logicalCluster(path, phase string, annotations map[string]string) *unstructured.Unstructured {
	lc := obj(gvrLogical, "LogicalCluster", "", "cluster", map[string]any{"status": map[string]any{"phase": phase}})
	a := map[string]string{"kcp.io/path": path}
	for k, v := range annotations {
		a[k] = v
	}
	lc.SetAnnotations(a)
	return lc
}

func workspace(name string) *unstructured.Unstructured {
	return obj(gvrWorkspaces, "Workspace", "", name, map[string]any{"spec": map[string]any{"type": map[string]any{"name": "organization", "path": "root"}}})
}

func tenancyBinding() *unstructured.Unstructured {
	return exportBinding("root", "root", "tenancy.kcp.io")
}

func exportBinding(path, cluster, export string) *unstructured.Unstructured {
	return obj(gvrBindings, "APIBinding", "", export, map[string]any{
		"spec":   map[string]any{"reference": map[string]any{"export": map[string]any{"path": path, "name": export}}},
		"status": map[string]any{"apiExportClusterName": cluster, "boundResources": []any{map[string]any{"group": "tenancy.kcp.io", "resource": "workspaces"}}},
	})
}

type seed struct {
	shard, cluster string
	gvr            schema.GroupVersionResource
	obj            *unstructured.Unstructured
}

// world is the shard's user-read data: kcp's bootstrap policy in
// system:admin (abridged to what the requests below need), root with the
// tenancy APIExport's maximal permission policy, and two organizations.
func world() []seed {
	ro := kcpcache.UserReadPartition(lostShard)
	var out []seed
	add := func(cluster string, gvr schema.GroupVersionResource, objs ...*unstructured.Unstructured) {
		for _, o := range objs {
			out = append(out, seed{shard: ro, cluster: cluster, gvr: gvr, obj: o})
		}
	}
	admin := kcpcache.UserReadAdminCluster
	add(admin, gvrClusterRoles,
		clusterRole("system:kcp:workspace:access", urlRule([]string{"access"}, []string{"/"})),
		clusterRole("system:discovery", urlRule([]string{"get"}, []string{"/api", "/api/*", "/apis", "/apis/*"})),
		clusterRole("system:kcp:tenancy:reader", rule([]string{"get", "list", "watch"}, []string{"tenancy.kcp.io"}, []string{"workspaces"})),
	)
	add(admin, gvrCRBs, binding(gvrCRBs, "ClusterRoleBinding", "", "system:discovery", "ClusterRole", "system:discovery", subject("Group", "system:authenticated")))

	add("root", gvrLogical, logicalCluster("root", "Ready", nil))
	add("root", gvrWorkspaces, workspace("orga"), workspace("orgb"), workspace("orgc"))
	add("root", gvrBindings, tenancyBinding())
	add("root", gvrClusterRoles, clusterRole("system:kcp:apiexport:tenancy:maximal-permission-policy", rule([]string{"*"}, []string{"tenancy.kcp.io"}, []string{"workspaces"})))
	add("root", gvrCRBs,
		binding(gvrCRBs, "ClusterRoleBinding", "", "mpp", "ClusterRole", "system:kcp:apiexport:tenancy:maximal-permission-policy", subject("Group", "apis.kcp.io:binding:system:authenticated")),
		binding(gvrCRBs, "ClusterRoleBinding", "", "access", "ClusterRole", "system:kcp:workspace:access", subject("Group", "system:authenticated")),
		binding(gvrCRBs, "ClusterRoleBinding", "", "reader", "ClusterRole", "system:kcp:tenancy:reader", subject("Group", "system:authenticated")),
	)

	// orga: owner (everything), viewer (reads workspaces and rbac), a team
	// member who reads rolebindings in namespace team only; members of
	// group orga-members have access but no other rule.
	add("orgacluster", gvrLogical, logicalCluster("root:orga", "Ready", nil))
	add("orgacluster", gvrBindings, tenancyBinding())
	add("orgacluster", gvrWorkspaces, workspace("team1"))
	add("orgacluster", gvrClusterRoles,
		clusterRole("admin", rule([]string{"*"}, []string{"*"}, []string{"*"})),
		clusterRole("viewer", rule([]string{"get", "list", "watch"}, []string{"tenancy.kcp.io", "rbac.authorization.k8s.io"}, []string{"workspaces", "clusterroles", "rolebindings"})),
	)
	add("orgacluster", gvrCRBs,
		binding(gvrCRBs, "ClusterRoleBinding", "", "owner", "ClusterRole", "admin", subject("User", "owner")),
		binding(gvrCRBs, "ClusterRoleBinding", "", "viewer", "ClusterRole", "viewer", subject("User", "viewer")),
		binding(gvrCRBs, "ClusterRoleBinding", "", "access", "ClusterRole", "system:kcp:workspace:access",
			subject("User", "owner"), subject("User", "viewer"), subject("User", "teamer"), subject("Group", "orga-members")),
	)
	add("orgacluster", gvrRoles, obj(gvrRoles, "Role", "team", "rb-reader", map[string]any{"rules": []any{rule([]string{"get", "list"}, []string{"rbac.authorization.k8s.io"}, []string{"rolebindings"})}}))
	add("orgacluster", gvrRoleBindings, binding(gvrRoleBindings, "RoleBinding", "team", "teamer", "Role", "rb-reader", subject("User", "teamer")))

	// orgb requires group orgb-members; everybody authenticated has
	// access and reads workspaces (if in the group).
	add("orgbcluster", gvrLogical, logicalCluster("root:orgb", "Ready", map[string]string{"authorization.kcp.io/required-groups": "orgb-members"}))
	add("orgbcluster", gvrBindings, tenancyBinding())
	add("orgbcluster", gvrClusterRoles, clusterRole("viewer", rule([]string{"get", "list", "watch"}, []string{"tenancy.kcp.io"}, []string{"workspaces"})))
	add("orgbcluster", gvrCRBs,
		binding(gvrCRBs, "ClusterRoleBinding", "", "access", "ClusterRole", "system:kcp:workspace:access", subject("Group", "system:authenticated")),
		binding(gvrCRBs, "ClusterRoleBinding", "", "viewer", "ClusterRole", "viewer", subject("Group", "system:authenticated")),
	)
	// orgd and orge: the owner has every right locally, but workspaces
	// come from another export: "restricted" in root:provider (its policy
	// allows only vip) or "missing" (not in the cache).
	for _, c := range []struct{ cluster, path, export string }{{"orgdcluster", "root:orgd", "restricted"}, {"orgecluster", "root:orge", "missing"}} {
		add(c.cluster, gvrLogical, logicalCluster(c.path, "Ready", nil))
		add(c.cluster, gvrBindings, exportBinding("root:provider", "providercluster", c.export))
		add(c.cluster, gvrClusterRoles, clusterRole("admin", rule([]string{"*"}, []string{"*"}, []string{"*"})))
		add(c.cluster, gvrCRBs,
			binding(gvrCRBs, "ClusterRoleBinding", "", "owner", "ClusterRole", "admin", subject("User", "owner"), subject("User", "vip")),
			binding(gvrCRBs, "ClusterRoleBinding", "", "access", "ClusterRole", "system:kcp:workspace:access", subject("User", "owner"), subject("User", "vip")),
		)
	}
	add("providercluster", gvrLogical, logicalCluster("root:provider", "Ready", nil))
	add("providercluster", gvrClusterRoles, clusterRole("restricted-policy", rule([]string{"get", "list"}, []string{"tenancy.kcp.io"}, []string{"workspaces"})))
	add("providercluster", gvrCRBs, binding(gvrCRBs, "ClusterRoleBinding", "", "restricted-policy", "ClusterRole", "restricted-policy", subject("User", "apis.kcp.io:binding:vip")))
	// The APIExports, as kcp's own replication pushes them: in the shard's
	// partition.
	for _, e := range []struct{ cluster, name string }{{"root", "tenancy.kcp.io"}, {"providercluster", "restricted"}} {
		out = append(out, seed{shard: lostShard, cluster: e.cluster, gvr: gvrExports, obj: obj(gvrExports, "APIExport", "", e.name, map[string]any{
			"spec": map[string]any{"maximalPermissionPolicy": map[string]any{"local": map[string]any{}}},
		})})
	}
	// Another shard's user-read data without a heartbeat.
	out = append(out, seed{shard: kcpcache.UserReadPartition(unmarkedShard), cluster: "betacluster", gvr: gvrLogical, obj: logicalCluster("root:beta", "Ready", nil)})
	return out
}

type env struct {
	cache   *cachetest.Server
	front   *httptest.Server
	shardUp *httptest.Server
	up      bool
}

// identity is how the test's front-proxy stand-in authenticates: the user
// and groups kcp's front-proxy would have put in the request's context.
const (
	userHeader  = "X-Test-User"
	groupHeader = "X-Test-Group"
)

func startEnv(t *testing.T) *env {
	t.Helper()
	c := cachetest.StartServer(t)
	ctx := context.Background()
	admin := c.Config()
	for _, s := range world() {
		dyn, err := dynamic.NewForConfig(c.ScopedConfig(s.shard, s.cluster))
		if err != nil {
			t.Fatal(err)
		}
		r := dyn.Resource(s.gvr)
		var ri dynamic.ResourceInterface = r
		if ns := s.obj.GetNamespace(); ns != "" {
			ri = r.Namespace(ns)
		}
		if _, err := ri.Create(ctx, s.obj, metav1.CreateOptions{}); err != nil {
			t.Fatalf("seeding %s %s in %s/%s: %v", s.gvr.Resource, s.obj.GetName(), s.shard, s.cluster, err)
		}
	}
	writeHeartbeat(t, c, lostShard)

	fb, err := fallback.New(fallback.Config{Cache: admin, MaxWatch: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{cache: c}
	// The shard: refused connections while down; an echo of the query while up.
	e.shardUp = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]string{"servedBy": "shard", "query": r.URL.RawQuery})
	}))
	t.Cleanup(e.shardUp.Close)
	down := closedAddress(t)
	upURL, _ := url.Parse(e.shardUp.URL)
	proxy := &httputil.ReverseProxy{Director: func(r *http.Request) {
		r.URL.Scheme = "http"
		r.URL.Host = down
		if e.up {
			r.URL.Host = upURL.Host
		}
	}}
	target := func(r *http.Request) (fallback.Target, bool) {
		ws, _, _ := strings.Cut(strings.TrimPrefix(r.Context().Value(pathKey{}).(string), "/clusters/"), "/")
		cluster, ok := workspaces[ws]
		return fallback.Target{Shard: lostShard, Cluster: cluster}, ok
	}
	wrapped := fb.Wrap(proxy, target)
	e.front = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := context.WithValue(r.Context(), pathKey{}, r.URL.Path)
		if name := r.Header.Get(userHeader); name != "" {
			ctx = request.WithUser(ctx, &user.DefaultInfo{Name: name, Groups: r.Header.Values(groupHeader)})
		}
		wrapped.ServeHTTP(w, r.WithContext(ctx))
	}))
	t.Cleanup(e.front.Close)
	return e
}

type pathKey struct{}

// closedAddress is a loopback address nothing listens on.
func closedAddress(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}

func writeHeartbeat(t *testing.T, c *cachetest.Server, shard string) {
	t.Helper()
	partition := kcpcache.UserReadPartition(shard)
	dyn, err := dynamic.NewForConfig(c.ScopedConfig(partition, kcpcache.HeartbeatCluster))
	if err != nil {
		t.Fatal(err)
	}
	// The epoch a converged heartbeat records is the cache's own.
	epoch := epochOf(t, c)
	hb := obj(gvrHeartbeats, kcpcache.HeartbeatKind, "", partition, map[string]any{"spec": map[string]any{
		"renewTime":            time.Now().Add(-30 * time.Second).UTC().Format(metav1.RFC3339Micro),
		"leaseDurationSeconds": int64(10),
		"converged":            true,
		"epoch":                epoch,
	}})
	if _, err := dyn.Resource(gvrHeartbeats).Create(context.Background(), hb, metav1.CreateOptions{}); err != nil {
		t.Fatalf("writing the heartbeat: %v", err)
	}
}

// epochOf reads the cache's epoch from a response header.
func epochOf(t *testing.T, c *cachetest.Server) string {
	t.Helper()
	var epoch string
	cfg := c.ScopedConfig(lostShard, "root")
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(r *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(r)
			if err == nil {
				epoch = resp.Header.Get(kcpcache.EpochHeader)
			}
			return resp, err
		})
	}
	d, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Resource(gvrExports).List(context.Background(), metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	if epoch == "" {
		t.Fatal("the cache sent no epoch")
	}
	return epoch
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

type answer struct {
	code    int
	body    string
	warning string
	header  http.Header
}

func (e *env) do(t *testing.T, method, path, who string, groups ...string) answer {
	t.Helper()
	r, err := http.NewRequest(method, e.front.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if who != "" {
		r.Header.Set(userHeader, who)
	}
	for _, g := range groups {
		r.Header.Add(groupHeader, g)
	}
	if method != http.MethodGet {
		r.Body = io.NopCloser(strings.NewReader(`{}`))
	}
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return answer{code: resp.StatusCode, body: string(body), warning: resp.Header.Get("Warning"), header: resp.Header}
}

// TestFallbackAuthorizesAsTheShardWouldOrDenies is the decision table: each
// identity × request, with the answer kcp's authorizer chain gives on the
// same RBAC (worked out by hand from kcp's rules, not by the fallback), or a
// denial where the fallback cannot decide as the shard would.
func TestFallbackAuthorizesAsTheShardWouldOrDenies(t *testing.T) {
	e := startEnv(t)
	type identity struct {
		name   string
		groups []string
	}
	ids := map[string]identity{
		"owner":         {"owner", nil},
		"viewer":        {"viewer", nil},
		"teamer":        {"teamer", nil},
		"member":        {"someone", []string{"orga-members"}},
		"stranger":      {"stranger", nil},
		"masters":       {"admin", []string{"system:masters"}},
		"orgb-member":   {"bob", []string{"orgb-members"}},
		"serviceacct":   {"system:serviceaccount:default:robot", []string{"system:serviceaccounts"}},
		"logical-admin": {"controller", []string{"system:kcp:logical-cluster-admin"}},
		"anonymous":     {"system:anonymous", []string{"system:unauthenticated"}},
		"vip":           {"vip", nil},
	}
	const (
		rootWS    = "/clusters/root/apis/tenancy.kcp.io/v1alpha1/workspaces"
		orgaWS    = "/clusters/root:orga/apis/tenancy.kcp.io/v1alpha1/workspaces"
		orgaWS1   = "/clusters/root:orga/apis/tenancy.kcp.io/v1alpha1/workspaces/team1"
		orgaCR    = "/clusters/root:orga/apis/rbac.authorization.k8s.io/v1/clusterroles"
		orgaRBns  = "/clusters/root:orga/apis/rbac.authorization.k8s.io/v1/namespaces/team/rolebindings"
		orgaRBall = "/clusters/root:orga/apis/rbac.authorization.k8s.io/v1/rolebindings"
		orgaLC    = "/clusters/root:orga/apis/core.kcp.io/v1alpha1/logicalclusters/cluster"
		orgaDisc  = "/clusters/root:orga/apis"
		orgbWS    = "/clusters/root:orgb/apis/tenancy.kcp.io/v1alpha1/workspaces"
		orgcWS    = "/clusters/root:orgc/apis/tenancy.kcp.io/v1alpha1/workspaces"
		orgdWS    = "/clusters/root:orgd/apis/tenancy.kcp.io/v1alpha1/workspaces"
		orgdCR    = "/clusters/root:orgd/apis/rbac.authorization.k8s.io/v1/clusterroles"
		orgeWS    = "/clusters/root:orge/apis/tenancy.kcp.io/v1alpha1/workspaces"
		orgeCR    = "/clusters/root:orge/apis/rbac.authorization.k8s.io/v1/clusterroles"
	)
	allow, deny := http.StatusOK, http.StatusForbidden
	cases := []struct {
		who  string
		path string
		want int
	}{
		// root: everybody authenticated has access and reads workspaces
		// (bootstrap reader; tenancy's policy allows the prefixed group).
		{"owner", rootWS, allow}, {"stranger", rootWS, allow}, {"member", rootWS, allow}, {"masters", rootWS, allow},
		{"anonymous", rootWS, deny},   // no system:authenticated: no access
		{"serviceacct", rootWS, deny}, // not modelled: denied, never allowed
		{"logical-admin", rootWS, deny},
		// orga
		{"owner", orgaWS, allow}, {"owner", orgaWS1, allow}, {"owner", orgaCR, allow}, {"owner", orgaRBall, allow}, {"owner", orgaLC, allow},
		{"viewer", orgaWS, allow}, {"viewer", orgaWS1, allow}, {"viewer", orgaCR, allow}, {"viewer", orgaRBns, allow},
		{"viewer", orgaLC, deny}, // no rule on logicalclusters
		{"teamer", orgaRBns, allow},
		{"teamer", orgaRBall, deny}, // the Role is namespaced
		{"teamer", orgaWS, deny},
		{"member", orgaWS, deny}, // access, but no rule
		{"member", orgaDisc, allow},
		{"stranger", orgaWS, deny}, {"stranger", orgaDisc, deny}, // no access to orga
		{"masters", orgaLC, allow},
		{"orgb-member", orgaWS, deny},
		// orgb requires its group
		{"orgb-member", orgbWS, allow}, {"owner", orgbWS, deny}, {"stranger", orgbWS, deny}, {"masters", orgbWS, allow},
		// orgc is not marked: nothing to decide on
		{"owner", orgcWS, deny}, {"stranger", orgcWS, deny},
		// orgd: the export's maximal permission policy caps local RBAC
		{"owner", orgdWS, deny}, {"vip", orgdWS, allow}, {"owner", orgdCR, allow},
		// orge: kcp would skip a policy it cannot find; the fallback cannot
		// tell "no export" from "not replicated", and denies
		{"owner", orgeWS, deny}, {"vip", orgeWS, deny}, {"owner", orgeCR, allow},
	}
	for _, c := range cases {
		id := ids[c.who]
		got := e.do(t, http.MethodGet, c.path, id.name, id.groups...)
		if got.code != c.want {
			t.Errorf("%s GET %s: got %d, want %d: %s", c.who, c.path, got.code, c.want, got.body)
			continue
		}
		if !strings.Contains(got.body, "shard root does not answer") && got.code != http.StatusOK {
			t.Errorf("%s GET %s: the refusal does not name the lost shard: %s", c.who, c.path, got.body)
		}
		if got.code == http.StatusOK && !strings.Contains(got.warning, "shard root does not answer") {
			t.Errorf("%s GET %s: served without the Warning: %q", c.who, c.path, got.warning)
		}
	}
}

func TestFallbackServesReadOnlyWithItsOwnVersions(t *testing.T) {
	e := startEnv(t)
	owner := "owner"

	// A list: the cache's objects, every version prefixed, a Warning with
	// the age from the partition's heartbeat (written 30 s in the past).
	got := e.do(t, http.MethodGet, "/clusters/root/apis/tenancy.kcp.io/v1alpha1/workspaces", owner)
	if got.code != http.StatusOK {
		t.Fatalf("list: %d %s", got.code, got.body)
	}
	var list unstructured.UnstructuredList
	if err := json.Unmarshal([]byte(got.body), &list); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, it := range list.Items {
		names = append(names, it.GetName())
		if !strings.HasPrefix(it.GetResourceVersion(), "cache-") {
			t.Errorf("item %s has resourceVersion %q, not the fallback's", it.GetName(), it.GetResourceVersion())
		}
	}
	slices.Sort(names)
	if want := []string{"orga", "orgb", "orgc"}; !slices.Equal(names, want) {
		t.Errorf("root's workspaces: got %v, want %v", names, want)
	}
	listRV := list.GetResourceVersion()
	if !strings.HasPrefix(listRV, "cache-") {
		t.Errorf("list resourceVersion %q is not the fallback's", listRV)
	}
	if !strings.Contains(got.warning, "last confirmed by the shard 30s ago") && !strings.Contains(got.warning, "last confirmed by the shard 31s ago") {
		t.Errorf("Warning does not give the heartbeat's age: %q", got.warning)
	}

	// Writes, subresources and types that are not replicated: 503.
	for _, c := range []struct{ method, path, says string }{
		{http.MethodPost, "/clusters/root/apis/tenancy.kcp.io/v1alpha1/workspaces", "read-only"},
		{http.MethodDelete, "/clusters/root/apis/tenancy.kcp.io/v1alpha1/workspaces/orga", "read-only"},
		{http.MethodGet, "/clusters/root/apis/tenancy.kcp.io/v1alpha1/workspaces/orga/status", "not replicated"},
		{http.MethodGet, "/clusters/root/api/v1/configmaps", "not replicated"},
		{http.MethodGet, "/clusters/root/openapi/v3", "not served from the cache"},
	} {
		got := e.do(t, c.method, c.path, "admin", "system:masters")
		if got.code != http.StatusServiceUnavailable || !strings.Contains(got.body, c.says) || !strings.Contains(got.body, "shard root does not answer") {
			t.Errorf("%s %s: got %d %s, want 503 saying %q", c.method, c.path, got.code, got.body, c.says)
		}
		// Retrying does not change a refusal while the shard is lost:
		// client-go would retry a 503 with Retry-After.
		if ra := got.header.Get("Retry-After"); ra != "" {
			t.Errorf("%s %s: the refusal carries Retry-After %q", c.method, c.path, ra)
		}
	}

	// The shard's versions are not resumed in the cache's history: a watch
	// gets 410, a list is served at the cache's current state.
	got = e.do(t, http.MethodGet, "/clusters/root/apis/tenancy.kcp.io/v1alpha1/workspaces?watch=true&resourceVersion=12345", owner)
	if got.code != http.StatusGone {
		t.Errorf("watch at a shard's resourceVersion: got %d %s, want 410", got.code, got.body)
	}
	got = e.do(t, http.MethodGet, "/clusters/root/apis/tenancy.kcp.io/v1alpha1/workspaces?resourceVersion=12345", owner)
	if got.code != http.StatusOK {
		t.Errorf("list at a shard's resourceVersion: got %d %s, want 200", got.code, got.body)
	}
	// A watch from the fallback's own version: its events carry the
	// fallback's versions too, and it ends by itself (MaxWatch).
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.front.URL+"/clusters/root:orga/apis/tenancy.kcp.io/v1alpha1/workspaces?watch=true&allowWatchBookmarks=false&resourceVersion="+url.QueryEscape(listRVOf(t, e, owner)), nil)
	req.Header.Set(userHeader, owner)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("watch from the fallback's version: %d %s", resp.StatusCode, b)
	}
	// Change the copy in the cache; the watch must deliver it.
	dyn, _ := dynamic.NewForConfig(e.cache.ScopedConfig(kcpcache.UserReadPartition(lostShard), "orgacluster"))
	ws, err := dyn.Resource(gvrWorkspaces).Get(context.Background(), "team1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ws.SetLabels(map[string]string{"changed": "yes"})
	if _, err := dyn.Resource(gvrWorkspaces).Update(context.Background(), ws, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(resp.Body)
	var event struct {
		Type   string                    `json:"type"`
		Object unstructured.Unstructured `json:"object"`
	}
	if err := dec.Decode(&event); err != nil {
		t.Fatalf("reading the watch: %v", err)
	}
	if event.Type != "MODIFIED" || event.Object.GetLabels()["changed"] != "yes" || !strings.HasPrefix(event.Object.GetResourceVersion(), "cache-") {
		t.Errorf("watch event: %s %v rv %q", event.Type, event.Object.GetLabels(), event.Object.GetResourceVersion())
	}
	start := time.Now()
	for dec.Decode(&event) == nil {
	}
	if waited := time.Since(start); waited > 20*time.Second {
		t.Errorf("the fallback's watch lasted %s after its event; MaxWatch is 5s", waited)
	}
	resp.Body.Close()

	// Discovery lists the replicated types, read-only.
	got = e.do(t, http.MethodGet, "/clusters/root:orga/apis/tenancy.kcp.io/v1alpha1", owner)
	if got.code != http.StatusOK || !strings.Contains(got.body, `"workspaces"`) || strings.Contains(got.body, `"create"`) {
		t.Errorf("discovery: %d %s", got.code, got.body)
	}

	// The shard answers again: requests go to it at once, and a version of
	// the cache is not carried over.
	e.up = true
	got = e.do(t, http.MethodGet, "/clusters/root/apis/tenancy.kcp.io/v1alpha1/workspaces?resourceVersion="+url.QueryEscape(listRV), owner)
	if got.code != http.StatusOK || !strings.Contains(got.body, `"servedBy":"shard"`) || strings.Contains(got.body, "resourceVersion") || got.warning != "" {
		t.Errorf("list after the shard returned: %d %s (warning %q)", got.code, got.body, got.warning)
	}
	got = e.do(t, http.MethodGet, "/clusters/root/apis/tenancy.kcp.io/v1alpha1/workspaces?watch=true&resourceVersion="+url.QueryEscape(listRV), owner)
	if got.code != http.StatusGone {
		t.Errorf("watch at the cache's version after the shard returned: got %d %s, want 410", got.code, got.body)
	}
	e.up = false
}

func listRVOf(t *testing.T, e *env, who string) string {
	got := e.do(t, http.MethodGet, "/clusters/root:orga/apis/tenancy.kcp.io/v1alpha1/workspaces", who)
	var list unstructured.UnstructuredList
	if err := json.Unmarshal([]byte(got.body), &list); err != nil {
		t.Fatalf("list: %d %s", got.code, got.body)
	}
	return list.GetResourceVersion()
}

func TestFallbackRefusesWhatTheCacheCannotVouchFor(t *testing.T) {
	e := startEnv(t)
	// A shard whose user-read partition has data but no heartbeat.
	fb, err := fallback.New(fallback.Config{Cache: e.cache.Config()})
	if err != nil {
		t.Fatal(err)
	}
	w := httptest.NewRecorder()
	r := httptest.NewRequest(http.MethodGet, "/clusters/root:beta/apis/core.kcp.io/v1alpha1/logicalclusters/cluster", nil)
	r = r.WithContext(request.WithUser(r.Context(), &user.DefaultInfo{Name: "admin", Groups: []string{"system:masters"}}))
	fb.Serve(w, r, fallback.Target{Shard: unmarkedShard, Cluster: "betacluster"}, "/apis/core.kcp.io/v1alpha1/logicalclusters/cluster", fmt.Errorf("connection refused"))
	if w.Code != http.StatusServiceUnavailable || !strings.Contains(w.Body.String(), "no heartbeat") || w.Header().Get("Retry-After") == "" {
		t.Errorf("no heartbeat: got %d %s (Retry-After %q), want 503 naming the missing heartbeat, to be retried", w.Code, w.Body.String(), w.Header().Get("Retry-After"))
	}
	// A request that cannot be placed in a workspace is never served.
	w = httptest.NewRecorder()
	fb.Serve(w, r, fallback.Target{Shard: lostShard, Cluster: "Not A Cluster"}, "/apis/core.kcp.io/v1alpha1/logicalclusters/cluster", fmt.Errorf("connection refused"))
	if w.Code != http.StatusServiceUnavailable || !strings.Contains(w.Body.String(), "cannot be placed") {
		t.Errorf("unplaceable request: got %d %s", w.Code, w.Body.String())
	}
}
