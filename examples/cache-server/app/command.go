// Package app builds the cache-server command.
package app

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/klog/v2"

	"github.com/kcp-cache/kcp-cache/cache/options"
	"github.com/kcp-cache/kcp-cache/cache/server"
	"github.com/kcp-cache/kcp-cache/examples/internal/command"
)

// NewCommand returns the cache-server command.
func NewCommand() *cobra.Command {
	opts := options.NewOptions()
	cmd := &cobra.Command{
		Use:   "cache-server",
		Short: "Serve a kcp cache: shard-partitioned Kubernetes API objects in etcd",
		Long: `cache-server serves objects that kcp shards push, partitioned by shard and
logical cluster under /services/cache/shards/{shard}/clusters/{cluster}/. Without
--etcd-servers it runs an embedded etcd under --root-directory that only this
process can reach. Shards authenticate as system:kcp:shard:<name> (--client-ca-file
or --token-auth-file) and may write only their own partition.`,
	}
	return command.New(cmd, opts.AddFlags, func(ctx context.Context) error {
		completed, err := opts.Complete()
		if err != nil {
			return err
		}
		if errs := completed.Validate(); len(errs) > 0 {
			return utilerrors.NewAggregate(errs)
		}
		ctx = klog.NewContext(ctx, klog.Background().WithName("cache-server"))
		cfg, err := server.NewConfig(completed)
		if err != nil {
			return err
		}
		srv, err := cfg.Complete().New(ctx)
		if err != nil {
			return err
		}
		defer srv.Close()
		klog.FromContext(ctx).Info("Serving", "admin-kubeconfig", srv.KubeconfigPath(),
			"example", fmt.Sprintf("kubectl --kubeconfig %s --server %s/services/cache/shards/amber/clusters/root get apiexports", srv.KubeconfigPath(), srv.AdminConfig().Host))
		return srv.PrepareRun().Run(ctx)
	})
}
