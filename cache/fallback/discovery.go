package fallback

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

// serveDiscovery answers the discovery of a lost workspace with the types the
// fallback serves, read-only, so that kubectl finds them: /api, /api/v1,
// /apis, /apis/<group> and /apis/<group>/<version>, in the unaggregated
// form (a client that asked for aggregated discovery falls back to it). Any
// other non-resource path (openapi, version, health) is refused. Discovery
// is authorized as the shard would: workspace access, then RBAC on the
// non-resource path.
func (f *Fallback) serveDiscovery(w http.ResponseWriter, r *http.Request, t Target, trail, lost string) {
	if r.Method != http.MethodGet {
		writeStatus(w, refused(fmt.Sprintf("%s; its workspaces are read-only from the cache until it returns", lost)))
		return
	}
	answer, ok := f.discovery(strings.TrimSuffix(trail, "/"))
	if !ok {
		writeStatus(w, refused(fmt.Sprintf("%s; %s is not served from the cache", lost, trail)))
		return
	}
	user, _ := userFrom(r)
	d, err := f.authorize(r.Context(), f.newSnapshot(t), user, attributes{verb: "get", path: trail})
	if err != nil {
		writeStatus(w, unavailable(fmt.Sprintf("%s, and the cache cannot answer for it: %v", lost, err)))
		return
	}
	if !d.allowed {
		writeStatus(w, forbidden(schema.GroupResource{}, "", fmt.Sprintf("%s; the read-only fallback denies it: %s", lost, d.reason)))
		return
	}
	body, _ := json.Marshal(answer)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Add("Warning", `299 - "`+strings.ReplaceAll(lost, `"`, `'`)+`: read-only discovery from the kcp cache"`)
	_, _ = w.Write(body)
}

// discovery returns the discovery document at path, and false for a path
// that is not discovery.
func (f *Fallback) discovery(path string) (any, bool) {
	groups := map[string][]string{}
	var names []string
	for _, t := range f.types {
		if _, ok := groups[t.Group]; !ok {
			names = append(names, t.Group)
		}
		groups[t.Group] = t.Versions
	}
	slices.Sort(names)
	parts := strings.Split(strings.TrimPrefix(path, "/"), "/")
	switch {
	case path == "/api":
		return &metav1.APIVersions{TypeMeta: metav1.TypeMeta{Kind: "APIVersions", APIVersion: "v1"}, Versions: []string{"v1"}}, true
	case path == "/api/v1":
		return f.resourceList(schema.GroupVersion{Version: "v1"}), true
	case path == "/apis":
		list := &metav1.APIGroupList{TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"}}
		for _, g := range names {
			if g != "" {
				list.Groups = append(list.Groups, apiGroup(g, groups[g]))
			}
		}
		return list, true
	case len(parts) == 2 && parts[0] == "apis":
		versions, ok := groups[parts[1]]
		if !ok {
			return nil, false
		}
		g := apiGroup(parts[1], versions)
		g.TypeMeta = metav1.TypeMeta{Kind: "APIGroup", APIVersion: "v1"}
		return &g, true
	case len(parts) == 3 && parts[0] == "apis":
		if !slices.Contains(groups[parts[1]], parts[2]) {
			return nil, false
		}
		return f.resourceList(schema.GroupVersion{Group: parts[1], Version: parts[2]}), true
	}
	return nil, false
}

func apiGroup(name string, versions []string) metav1.APIGroup {
	g := metav1.APIGroup{Name: name}
	for _, v := range versions {
		g.Versions = append(g.Versions, metav1.GroupVersionForDiscovery{GroupVersion: name + "/" + v, Version: v})
	}
	// The newest version is listed last in a kcpcache.Type; it is preferred.
	g.PreferredVersion = g.Versions[len(g.Versions)-1]
	return g
}

func (f *Fallback) resourceList(gv schema.GroupVersion) *metav1.APIResourceList {
	list := &metav1.APIResourceList{TypeMeta: metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"}, GroupVersion: gv.String()}
	var types []kcpcache.Type
	for _, t := range f.types {
		if t.Group == gv.Group && slices.Contains(t.Versions, gv.Version) {
			types = append(types, t)
		}
	}
	slices.SortFunc(types, func(a, b kcpcache.Type) int { return strings.Compare(a.Resource, b.Resource) })
	for _, t := range types {
		list.APIResources = append(list.APIResources, metav1.APIResource{
			Name:         t.Resource,
			SingularName: strings.ToLower(t.Kind),
			Namespaced:   t.Namespaced,
			Kind:         t.Kind,
			Verbs:        metav1.Verbs{"get", "list", "watch"},
		})
	}
	if list.APIResources == nil {
		list.APIResources = []metav1.APIResource{}
	}
	return list
}
