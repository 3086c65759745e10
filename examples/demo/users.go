package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/rest"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/fallback"
	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
)

// The user of the demo's read-only fallback, and the header its stand-in
// front-proxy authenticates by (kcp's front-proxy authenticates client
// certificates or tokens; what the fallback gets is the same user).
const (
	demoUser       = "carol"
	demoUserHeader = "X-Demo-User"
)

var (
	logicalClusters     = schema.GroupVersionResource{Group: "core.kcp.io", Version: "v1alpha1", Resource: "logicalclusters"}
	clusterRoles        = rbacv1.SchemeGroupVersion.WithResource("clusterroles")
	clusterRoleBindings = rbacv1.SchemeGroupVersion.WithResource("clusterrolebindings")
)

// prepareUserRead gives alpha what a kcp shard has and the fallback needs:
// the marked workspace's LogicalCluster, a bootstrap policy in system:admin,
// and RBAC that lets carol read the workspace; then waits until alpha's
// user-read partition holds them and its heartbeat says converged.
func (d *demo) prepareUserRead(ctx context.Context) error {
	alpha := d.shards["alpha"].Config
	admin := scoped(alpha, "/clusters/"+kcpcache.UserReadAdminCluster)
	if _, err := admin.Resource(clusterRoles).Create(ctx, rbacObject("ClusterRole", "system:kcp:workspace:access", map[string]any{
		"rules": []any{map[string]any{"verbs": []any{"access"}, "nonResourceURLs": []any{"/"}}},
	}), metav1.CreateOptions{}); err != nil {
		return err
	}
	payments := scoped(alpha, "/clusters/"+exportCluster)
	lc := rbacObject("LogicalCluster", "cluster", map[string]any{"status": map[string]any{"phase": "Ready"}})
	lc.SetAPIVersion(logicalClusters.GroupVersion().String())
	if _, err := payments.Resource(logicalClusters).Create(ctx, lc, metav1.CreateOptions{}); err != nil {
		return err
	}
	if _, err := payments.Resource(clusterRoles).Create(ctx, rbacObject("ClusterRole", "viewer", map[string]any{
		"rules": []any{map[string]any{"verbs": []any{"get", "list", "watch"}, "apiGroups": []any{"rbac.authorization.k8s.io"}, "resources": []any{"*"}}},
	}), metav1.CreateOptions{}); err != nil {
		return err
	}
	for _, b := range []struct{ name, role string }{{"carol-access", "system:kcp:workspace:access"}, {"carol-viewer", "viewer"}} {
		if _, err := payments.Resource(clusterRoleBindings).Create(ctx, rbacObject("ClusterRoleBinding", b.name, map[string]any{
			"roleRef":  map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": b.role},
			"subjects": []any{map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": demoUser}},
		}), metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	partition := kcpcache.UserReadPartition("alpha")
	copies := scoped(d.cache.Config(), kcpcache.ScopedPathPrefix(kcpcache.Scope{Shard: partition, Cluster: exportCluster}))
	beats := scoped(d.cache.Config(), kcpcache.ScopedPathPrefix(kcpcache.Scope{Shard: partition, Cluster: kcpcache.HeartbeatCluster}))
	return cachetest.Poll(ctx, func(context.Context) error {
		list, err := copies.Resource(clusterRoleBindings).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		if len(list.Items) != 2 {
			return fmt.Errorf("%d ClusterRoleBindings of %s in %s", len(list.Items), exportCluster, partition)
		}
		hb, err := beats.Resource(kcpcache.HeartbeatResource).Get(ctx, partition, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if converged, _, _ := unstructured.NestedBool(hb.Object, "spec", "converged"); !converged {
			return fmt.Errorf("the heartbeat of %s is not converged", partition)
		}
		return nil
	})
}

// readAsUser puts kcp's read-only fallback in front of alpha, as kcp's
// front-proxy does with hack/kcp/kcp-front-proxy-fallback.patch, and reads
// the lost shard's workspace as a user.
func (d *demo) readAsUser(ctx context.Context) error {
	fb, err := fallback.New(fallback.Config{Cache: d.cache.Config()})
	if err != nil {
		return err
	}
	alphaCfg := d.shards["alpha"].Config
	alphaURL, err := url.Parse(alphaCfg.Host)
	if err != nil {
		return err
	}
	transport, err := rest.TransportFor(alphaCfg)
	if err != nil {
		return err
	}
	shardProxy := &httputil.ReverseProxy{Transport: transport, Director: func(r *http.Request) {
		r.URL.Scheme, r.URL.Host = alphaURL.Scheme, alphaURL.Host
	}}
	target := func(r *http.Request) (fallback.Target, bool) {
		return fallback.Target{Shard: "alpha", Cluster: exportCluster}, strings.HasPrefix(r.URL.Path, "/clusters/"+exportCluster+"/")
	}
	wrapped := fb.Wrap(shardProxy, target)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if name := r.Header.Get(demoUserHeader); name != "" {
			r = r.WithContext(request.WithUser(r.Context(), &user.DefaultInfo{Name: name, Groups: []string{user.AllAuthenticated}}))
		}
		wrapped.ServeHTTP(w, r)
	}))
	defer front.Close()
	detail("a stand-in of kcp's front-proxy at %s sends /clusters/%s/... to shard alpha, with the fallback reading the cache", front.URL, exportCluster)

	path := "/clusters/" + exportCluster + "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings"
	for _, c := range []struct {
		who, method string
		want        int
	}{{demoUser, http.MethodGet, http.StatusOK}, {"mallory", http.MethodGet, http.StatusForbidden}, {demoUser, http.MethodPost, http.StatusServiceUnavailable}} {
		req, err := http.NewRequestWithContext(ctx, c.method, front.URL+path, strings.NewReader("{}"))
		if err != nil {
			return err
		}
		req.Header.Set(demoUserHeader, c.who)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.want {
			return fmt.Errorf("%s %s as %s: got %d, want %d: %s", c.method, path, c.who, resp.StatusCode, c.want, body)
		}
		switch {
		case resp.StatusCode == http.StatusOK:
			detail("%s %s as %s: %d, %d bindings; Warning: %s", c.method, path, c.who, resp.StatusCode, strings.Count(string(body), `"roleRef"`), resp.Header.Get("Warning"))
		default:
			detail("%s %s as %s: %d %s", c.method, path, c.who, resp.StatusCode, statusMessage(body))
		}
	}
	return nil
}

// rbacObject is an object of kind with name and fields besides its
// metadata, as RBAC's are (rules, roleRef, subjects); its apiVersion is
// RBAC's unless changed.
func rbacObject(kind, name string, fields map[string]any) *unstructured.Unstructured {
	o := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, "metadata": map[string]any{"name": name}}}
	for k, v := range fields {
		o.Object[k] = v
	}
	return o
}

func statusMessage(body []byte) string {
	var st metav1.Status
	if err := json.Unmarshal(body, &st); err != nil || st.Message == "" {
		return string(body)
	}
	return st.Message
}
