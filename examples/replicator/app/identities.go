package app

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/client"
)

// A kcp shard serves some of kcp's own types through APIExports of its root
// workspace (Workspaces through the export tenancy.kcp.io); across logical
// clusters (/clusters/*) it lists such a type only by the export's identity,
// as "<resource>:<identity hash>", and answers 404 without it. kcp's own
// informers add the identities to their wildcard requests (kcp's
// pkg/server/bootstrap/identity.go); so does the replicator.

var apiExportsGVR = schema.GroupVersionResource{Group: "apis.kcp.io", Version: "v1alpha2", Resource: "apiexports"}

// exportOf names the APIExport of root that serves gr on a kcp shard, as
// kcp's KcpRootGroupExportNames and KcpRootGroupResourceExportNames do.
func exportOf(gr schema.GroupResource) (string, bool) {
	switch {
	case gr.Group == "tenancy.kcp.io" || gr.Group == "topology.kcp.io":
		return gr.Group, true
	case gr == schema.GroupResource{Group: "core.kcp.io", Resource: "shards"}:
		return "shards.core.kcp.io", true
	case gr == schema.GroupResource{Group: "migration.kcp.io", Resource: "logicalclustermigrations"}:
		return "migration.kcp.io", true
	}
	return "", false
}

// identityPoll spaces the attempts to learn an identity.
const identityPoll = 2 * time.Second

// resolveIdentities returns, for every type of gvrs that the shard lists
// across clusters only with an APIExport's identity, that identity. It asks
// the shard first (the root shard holds root's exports) and the cache next
// (where the root shard's replication puts them), and tries again until it
// knows them all or ctx is done: a replicator that started before the
// root shard pushed its exports waits for them.
func resolveIdentities(ctx context.Context, shard *rest.Config, cache *client.ClusterClient, gvrs []schema.GroupVersionResource) (map[schema.GroupVersionResource]string, error) {
	logger := klog.FromContext(ctx)
	root := rest.CopyConfig(shard)
	root.Host = kcpcache.JoinHostPath(shard.Host, "/"+kcpcache.ClustersSegment+"/root")
	shardClient, err := dynamic.NewForConfig(root)
	if err != nil {
		return nil, err
	}
	out := map[schema.GroupVersionResource]string{}
	for _, gvr := range gvrs {
		export, ok := exportOf(gvr.GroupResource())
		if !ok {
			continue
		}
		var identity string
		err := wait.PollUntilContextCancel(ctx, identityPoll, true, func(ctx context.Context) (bool, error) {
			needed, err := needsIdentity(ctx, shard, gvr)
			if err != nil {
				logger.Info("Cannot tell whether the shard needs an identity for a type; retrying", "resource", gvr.GroupResource(), "err", err)
				return false, nil
			}
			if !needed {
				return true, nil
			}
			if identity, err = identityFrom(ctx, shardClient, cache, export); err != nil {
				logger.Info("Waiting for the identity of an APIExport of root", "export", export, "resource", gvr.GroupResource(), "err", err)
				return false, nil
			}
			return true, nil
		})
		if err != nil {
			return nil, fmt.Errorf("learning the identity of APIExport root:%s for %s: %w", export, gvr.GroupResource(), err)
		}
		if identity != "" {
			logger.Info("Listing a type by its APIExport's identity", "resource", gvr.GroupResource(), "export", export, "identity", identity)
			out[gvr] = identity
		}
	}
	return out, nil
}

// needsIdentity asks the shard for one object of gvr across its clusters:
// 404 means the type is served only by an identity.
func needsIdentity(ctx context.Context, shard *rest.Config, gvr schema.GroupVersionResource) (bool, error) {
	rc, err := rest.HTTPClientFor(shard)
	if err != nil {
		return false, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, kcpcache.JoinHostPath(shard.Host, wildcardPath(gvr)+"?limit=1"), nil)
	if err != nil {
		return false, err
	}
	resp, err := rc.Do(req)
	if err != nil {
		return false, err
	}
	_ = resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		return false, nil
	case http.StatusNotFound:
		return true, nil
	}
	return false, fmt.Errorf("GET %s answered %s", wildcardPath(gvr), resp.Status)
}

// identityFrom reads the identity of root's APIExport export from the shard,
// else from the cache.
func identityFrom(ctx context.Context, shard dynamic.Interface, cache *client.ClusterClient, export string) (string, error) {
	u, shardErr := shard.Resource(apiExportsGVR).Get(ctx, export, metav1.GetOptions{})
	if shardErr == nil {
		if id := identityOf(u); id != "" {
			return id, nil
		}
	}
	list, err := cache.Cluster(kcpcache.Wildcard, "root").Resource(apiExportsGVR).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", fmt.Errorf("not on the shard (%v), and listing root's APIExports in the cache: %w", shardErr, err)
	}
	for i := range list.Items {
		if list.Items[i].GetName() == export {
			if id := identityOf(&list.Items[i]); id != "" {
				return id, nil
			}
		}
	}
	return "", fmt.Errorf("neither the shard (%v) nor the cache has APIExport root:%s with an identity yet", shardErr, export)
}

func identityOf(u *unstructured.Unstructured) string {
	id, _, _ := unstructured.NestedString(u.Object, "status", "identityHash")
	return id
}

// wildcardPath is the shard's path of gvr across its clusters.
func wildcardPath(gvr schema.GroupVersionResource) string {
	return "/" + kcpcache.ClustersSegment + "/" + kcpcache.Wildcard + "/apis/" + gvr.Group + "/" + gvr.Version + "/" + gvr.Resource
}

// injectIdentities makes every request of a type in ids across the shard's
// clusters name the type by its identity.
func injectIdentities(ids map[schema.GroupVersionResource]string) func(http.RoundTripper) http.RoundTripper {
	paths := map[string]string{}
	for gvr, id := range ids {
		paths[wildcardPath(gvr)] = wildcardPath(gvr) + ":" + id
	}
	return func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			to, ok := paths[strings.TrimSuffix(req.URL.Path, "/")]
			if !ok {
				return rt.RoundTrip(req)
			}
			req = req.Clone(req.Context())
			req.URL.Path, req.URL.RawPath = to, ""
			return rt.RoundTrip(req)
		})
	}
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }
