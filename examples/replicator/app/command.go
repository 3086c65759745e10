// Package app builds the replicator command: what runs beside a stock kcp
// shard to push what users read in its marked workspaces into the shard's
// user-read partition of the cache (kcpcache.UserReadPartition), with that
// partition's heartbeat. kcp's own replication keeps the shard's partition;
// the replicator writes nothing else.
package app

import (
	"context"
	"fmt"
	"sync"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/klog/v2"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/client"
	"github.com/kcp-cache/kcp-cache/cache/hook"
	"github.com/kcp-cache/kcp-cache/cache/replication"
	"github.com/kcp-cache/kcp-cache/examples/internal/command"
)

const (
	// cacheQPS and cacheBurst bound the requests to the cache, as the
	// hook's defaults do.
	cacheQPS   = 500
	cacheBurst = 1000
)

// NewCommand returns the replicator command.
func NewCommand() *cobra.Command {
	opts := NewOptions()
	cmd := &cobra.Command{
		Use:   "replicator",
		Short: "Push what users read in a kcp shard's marked workspaces into its user-read partition of a kcp cache",
		Long: `replicator runs beside a stock kcp shard, with the shard's admin kubeconfig and a
cache kubeconfig. For the workspaces marked by --user-read-workspaces and
--user-read-workspace-types it keeps the partition <shard-name>:readonly of the
cache an exact copy of their objects of --user-read-resources (Workspaces,
LogicalCluster, APIBindings, RBAC by default), plus the RBAC of the shard's
system:admin cluster, and renews that partition's heartbeat. kcp's own
replication keeps shards/<shard-name>; the replicator writes nothing there.`,
	}
	return command.New(cmd, opts.AddFlags, func(ctx context.Context) error {
		if errs := opts.Validate(); len(errs) > 0 {
			return utilerrors.NewAggregate(errs)
		}
		ctx = klog.NewContext(ctx, klog.Background().WithName("replicator").WithValues("shard", opts.ShardName))
		return Run(ctx, opts)
	})
}

// FlagSets are the command's flag sets, for docs/flags.md.
func FlagSets() cliflag.NamedFlagSets { return command.FlagSets(NewOptions().AddFlags) }

// Run replicates until ctx is done. It returns an error only when it cannot
// start: the kubeconfigs are unusable, or ctx ended before the identities of
// kcp's types were known.
func Run(ctx context.Context, o *Options) error {
	logger := klog.FromContext(ctx)
	shardConfig, err := shardRESTConfig(o)
	if err != nil {
		return err
	}
	cacheConfig, err := client.ConfigFromKubeconfig(o.CacheKubeconfig, o.CacheContext)
	if err != nil {
		return fmt.Errorf("--cache-kubeconfig: %w", err)
	}
	if cacheConfig.QPS == 0 && cacheConfig.RateLimiter == nil {
		cacheConfig.QPS, cacheConfig.Burst = cacheQPS, cacheBurst
	}
	cacheClient, err := client.NewForConfig(cacheConfig)
	if err != nil {
		return err
	}
	userRead := replication.UserReadConfig{Shard: o.ShardName, CacheClient: cacheClient}
	if err := o.UserRead.ApplyTo(&userRead); err != nil {
		return err
	}
	gvrs := []schema.GroupVersionResource{replication.LogicalClustersGVR}
	for _, t := range userRead.Types {
		gvrs = append(gvrs, t.GVR())
	}
	ids, err := resolveIdentities(ctx, shardConfig, cacheClient, gvrs)
	if err != nil {
		return err
	}
	shardConfig.Wrap(injectIdentities(ids))
	localClient, err := client.NewForConfigWithPaths(shardConfig, func(scope kcpcache.Scope) string {
		return "/" + kcpcache.ClustersSegment + "/" + scope.Cluster
	})
	if err != nil {
		return err
	}
	local := client.NewInformerFactory(localClient, kcpcache.Scope{Shard: o.ShardName, Cluster: kcpcache.Wildcard}, 0)
	defer local.Shutdown()
	userRead.LocalSources = replication.FactorySources(local)
	ctrl, err := replication.NewUserReadController(&userRead)
	if err != nil {
		return err
	}
	partition := kcpcache.UserReadPartition(o.ShardName)
	logger.Info("Replicating the user-read partition", "partition", partition, "workspaces", userRead.Marking.Paths,
		"workspaceTypes", userRead.Marking.Types, "resources", kcpcache.TypeNames(userRead.Types))
	local.Start(ctx) // after NewUserReadController, which asks for the informers
	var wg sync.WaitGroup
	wg.Go(func() { ctrl.Run(ctx, o.Workers) })
	wg.Go(func() {
		hook.RunHeartbeat(klog.NewContext(ctx, logger.WithValues("partition", partition)), partition, cacheClient, ctrl.Controller().Status, o.HeartbeatInterval)
	})
	wg.Go(func() {
		select {
		case <-ctrl.Controller().InitialSyncDone():
			logger.Info("The user-read partition has converged", "partition", partition)
		case <-ctx.Done():
		}
	})
	wg.Wait()
	return nil
}

// shardRESTConfig loads the shard's kubeconfig, with DefaultShardContext
// when no context is named and the kubeconfig has it.
func shardRESTConfig(o *Options) (*rest.Config, error) {
	contextName := o.ShardContext
	if contextName == "" {
		raw, err := clientcmd.LoadFromFile(o.ShardKubeconfig)
		if err != nil {
			return nil, fmt.Errorf("--kubeconfig: %w", err)
		}
		if _, ok := raw.Contexts[DefaultShardContext]; ok {
			contextName = DefaultShardContext
		}
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
		&clientcmd.ClientConfigLoadingRules{ExplicitPath: o.ShardKubeconfig},
		&clientcmd.ConfigOverrides{CurrentContext: contextName}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("--kubeconfig: %w", err)
	}
	// Watches across every logical cluster of a shard: no client-side
	// throttling of the few requests that start them.
	cfg.QPS, cfg.Burst = -1, 0
	return cfg, nil
}
