package replication

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/client"
)

// A shard's user-read partition (kcpcache.UserReadPartition) holds, for the
// workspaces an operator marks, what users read there and what authorizing
// them needs (kcpcache.UserReadTypes), plus the RBAC of the shard's
// bootstrap policy cluster (kcpcache.UserReadAdminCluster), which kcp's
// authorizers consult for every workspace. A UserReadController keeps it: a
// Controller whose partition is the user-read one and whose cluster
// selection is the marking, re-evaluated whenever a LogicalCluster appears,
// changes its marks or goes.

const (
	// AnnotationWorkspaceType is where kcp records a workspace's type on
	// its LogicalCluster, as "<path of the type's workspace>:<type name>"
	// (root:organization); kcp's LogicalClusterTypeAnnotationKey.
	AnnotationWorkspaceType = "internal.tenancy.kcp.io/type"

	// logicalClusterName is the name of the one LogicalCluster object in
	// every logical cluster (kcp's corev1alpha1.LogicalClusterName).
	logicalClusterName = "cluster"

	rbacGroup = "rbac.authorization.k8s.io"
)

// LogicalClustersGVR is kcp's LogicalCluster type, which the marking reads.
var LogicalClustersGVR = schema.GroupVersionResource{Group: "core.kcp.io", Version: "v1alpha1", Resource: "logicalclusters"}

// Marking says which workspaces are marked: a logical cluster is when its
// workspace path, or its workspace type, is listed. Both come from the
// cluster's LogicalCluster: the path from kcp.io/path (kcp sets it on
// every workspace's LogicalCluster but root's, whose path is its name,
// "root"), the type from AnnotationWorkspaceType. A logical cluster name
// given as a path marks that cluster too (a cluster whose LogicalCluster
// has no path).
type Marking struct {
	// Paths are workspace paths, such as "root" or "root:org-a".
	Paths []string
	// Types are workspace types, such as "root:organization".
	Types []string
}

// Empty reports whether nothing is marked.
func (m Marking) Empty() bool { return len(m.Paths) == 0 && len(m.Types) == 0 }

// marker is a Marking ready for lookups.
type marker struct {
	paths, types sets.Set[string]
}

func newMarker(m Marking) marker {
	return marker{paths: sets.New(m.Paths...), types: sets.New(m.Types...)}
}

// marks reports whether the LogicalCluster obj (or a tombstone of it)
// marks its logical cluster; it returns the cluster too.
func (mk marker) marks(obj interface{}) (cluster string, marked bool) {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return "", false
	}
	a := m.GetAnnotations()
	cluster = a[kcpcache.AnnotationCluster]
	path := a[kcpcache.AnnotationPath]
	if path == "" {
		path = cluster
	}
	return cluster, cluster != "" && (mk.paths.Has(path) || mk.paths.Has(cluster) || mk.types.Has(a[AnnotationWorkspaceType]))
}

// UserReadConfig is what a UserReadController needs.
type UserReadConfig struct {
	// Shard is the shard the controller runs in; it writes the partition
	// kcpcache.UserReadPartition(Shard).
	Shard string
	// CacheClient reaches the cache server; see Config.CacheClient.
	CacheClient *client.ClusterClient
	// LocalSources provides the shard's own view of every type, and of
	// LogicalClusters (LogicalClustersGVR) for the marking, whether or not
	// they are among Types.
	LocalSources SourceProvider
	// Marking selects the workspaces; it must mark something.
	Marking Marking
	// Types are pushed for every marked workspace; nil means
	// kcpcache.UserReadTypes(). Those of the RBAC group are pushed for
	// kcpcache.UserReadAdminCluster too.
	Types []kcpcache.Type
	// CacheInformers is Config.CacheInformers.
	CacheInformers func(schema.GroupVersionResource) cache.SharedIndexInformer
	// RateLimiter is Config.RateLimiter.
	RateLimiter workqueue.TypedRateLimiter[Key]
}

// UserReadController keeps a shard's user-read partition: one copy of every
// object of the user-read types in a marked workspace, and of the RBAC of
// kcpcache.UserReadAdminCluster, and nothing else. Make it with
// NewUserReadController and run it once with Run.
type UserReadController struct {
	ctrl     *Controller
	marker   marker
	clusters LocalSource
}

// NewUserReadController validates cfg and returns a controller for it; as
// NewController, it contacts nothing before Run.
func NewUserReadController(cfg *UserReadConfig) (*UserReadController, error) {
	if cfg == nil {
		return nil, errors.New("user-read replication: no config")
	}
	if cfg.Marking.Empty() {
		return nil, errors.New("user-read replication: no workspace is marked")
	}
	if err := kcpcache.ValidateShardName(cfg.Shard); err != nil {
		return nil, fmt.Errorf("user-read replication: shard: %w", err)
	}
	if cfg.LocalSources == nil {
		return nil, errors.New("user-read replication: local sources are required")
	}
	types := cfg.Types
	if types == nil {
		types = kcpcache.UserReadTypes()
	}
	if len(types) == 0 {
		return nil, errors.New("user-read replication: no types")
	}
	clusters, err := cfg.LocalSources(LogicalClustersGVR)
	if err != nil {
		return nil, fmt.Errorf("user-read replication: local source of %s: %w", LogicalClustersGVR, err)
	}
	if clusters.Informer == nil || clusters.Get == nil {
		return nil, fmt.Errorf("user-read replication: local source of %s needs an informer and a Get function", LogicalClustersGVR)
	}
	u := &UserReadController{marker: newMarker(cfg.Marking), clusters: clusters}
	resources := make([]Resource, 0, len(types))
	for _, t := range types {
		resources = append(resources, Resource{GVR: t.GVR(), Kind: t.Kind})
	}
	u.ctrl, err = NewController(&Config{
		Shard:          kcpcache.UserReadPartition(cfg.Shard),
		CacheClient:    cfg.CacheClient,
		LocalSources:   cfg.LocalSources,
		CacheInformers: cfg.CacheInformers,
		Resources:      resources,
		Clusters:       u.selected,
		WaitFor:        []cache.InformerSynced{clusters.Informer.HasSynced},
		RateLimiter:    cfg.RateLimiter,
	})
	if err != nil {
		return nil, fmt.Errorf("user-read replication: %w", err)
	}
	return u, nil
}

// Controller is the replication controller of the user-read partition: its
// Status and InitialSyncDone say how far the partition has come.
func (u *UserReadController) Controller() *Controller { return u.ctrl }

// selected is the controller's cluster selection: the RBAC of the bootstrap
// policy cluster, and every type in a marked cluster. Other system clusters
// are never marked: kcp keeps them to the shard.
func (u *UserReadController) selected(gvr schema.GroupVersionResource, cluster string) bool {
	if cluster == kcpcache.UserReadAdminCluster {
		return gvr.Group == rbacGroup
	}
	if strings.HasPrefix(cluster, "system:") {
		return false
	}
	obj, err := u.clusters.Get(cluster, "", logicalClusterName)
	if err != nil || obj == nil {
		// No LogicalCluster (yet, or any more): nothing marks the cluster.
		return false
	}
	_, marked := u.marker.marks(obj)
	return marked
}

// Run replicates until ctx is done, as Controller.Run, and follows the
// marking: a LogicalCluster that appears marked, gains or loses its marks,
// or goes, makes the controller look at its cluster's objects again.
func (u *UserReadController) Run(ctx context.Context, workers int) {
	logger := klog.FromContext(ctx).WithName("user-read")
	ctx = klog.NewContext(ctx, logger)
	handle, err := u.clusters.Informer.AddEventHandler(u.markingHandler(ctx))
	if err != nil {
		utilruntime.HandleErrorWithContext(ctx, err, "Cannot follow the marking of workspaces; not replicating the user-read partition")
		return
	}
	defer func() {
		if err := u.clusters.Informer.RemoveEventHandler(handle); err != nil {
			logger.Error(err, "Removing a handler from the LogicalCluster informer")
		}
	}()
	u.ctrl.Run(ctx, workers)
}

// markingHandler resyncs a cluster whose marking changed. The initial list
// is left out: Run's first round looks at every key once the informers,
// this one included, have synced.
func (u *UserReadController) markingHandler(ctx context.Context) cache.ResourceEventHandler {
	resync := func(cluster, why string) {
		klog.FromContext(ctx).V(2).Info("Workspace marking changed; resyncing its cluster", "cluster", cluster, "change", why)
		u.ctrl.ResyncCluster(cluster)
	}
	return cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj interface{}, isInInitialList bool) {
			if cluster, marked := u.marker.marks(obj); marked && !isInInitialList {
				resync(cluster, "marked LogicalCluster appeared")
			}
		},
		UpdateFunc: func(oldObj, newObj interface{}) {
			_, was := u.marker.marks(oldObj)
			cluster, is := u.marker.marks(newObj)
			switch {
			case is && !was:
				resync(cluster, "marked")
			case was && !is:
				resync(cluster, "unmarked")
			}
		},
		DeleteFunc: func(obj interface{}) {
			if cluster, marked := u.marker.marks(obj); marked {
				resync(cluster, "marked LogicalCluster deleted")
			}
		},
	}
}
