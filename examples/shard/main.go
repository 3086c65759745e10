// Command shard runs a stand-in for a kcp shard: it stores kcp types per
// logical cluster under /clusters/{cluster}/..., pushes its APIExports and
// APIResourceSchemas into a cache, and resolves APIBindings local first,
// cache as fallback.
//
//	go run ./examples/shard --shard-name=alpha --run-cache-server
//	go run ./examples/shard --shard-name=beta --secure-port=6445 --root-directory=.kcp-shard-beta \
//	  --cache-kubeconfig=.kcp-cache/cache.kubeconfig
package main

import (
	"context"
	"os"

	"github.com/spf13/cobra"
	"k8s.io/component-base/cli"
	"k8s.io/klog/v2"

	"github.com/kcp-cache/kcp-cache/examples/internal/command"
	"github.com/kcp-cache/kcp-cache/examples/shard/shardserver"
)

func main() {
	os.Exit(cli.Run(newCommand()))
}

func newCommand() *cobra.Command {
	opts := shardserver.NewOptions()
	cmd := &cobra.Command{Use: "shard", Short: "Run a stand-in for a kcp shard that uses a kcp cache"}
	return command.New(cmd, opts.AddFlags, func(ctx context.Context) error {
		completed, err := opts.Complete()
		if err != nil {
			return err
		}
		if err := completed.Validate(); err != nil {
			return err
		}
		ctx = klog.NewContext(ctx, klog.Background().WithName("shard").WithValues("shard", completed.Cache.ShardName))
		s, err := shardserver.New(ctx, completed)
		if err != nil {
			return err
		}
		defer s.Close()
		klog.FromContext(ctx).Info("Serving", "address", s.AdminConfig().Host, "objects", s.AdminConfig().Host+"/clusters/{cluster}/apis/...", "degraded-status", s.AdminConfig().Host+"/readyz/cache-replication")
		return s.Run(ctx)
	})
}
