// Package app builds the cache-server command.
package app

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/klog/v2"

	// kcp's cache-server offers --logging-format=json and its
	// --log-json-* flags; so does this one.
	_ "k8s.io/component-base/logs/json/register"

	"github.com/kcp-cache/kcp-cache/cache/memreturn"
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
or --token-auth-file) and may write only their own partition.

Every flag of kcp's cache-server is accepted, so that it replaces kcp's binary or
image with the same arguments; the few that cannot mean anything here say so
below and are logged at start when set.

Subcommands: "cache-server backup --to FILE" takes a backup of a running
server's embedded etcd; "cache-server restore --from FILE" puts one into a
stopped server's data directory; "cache-server export-kcp-layout" prepares a
stopped server's data for kcp's cache-server. Each has its own --help.`,
	}
	cmd.AddCommand(newBackupCommand(), newRestoreCommand(), newExportKCPLayoutCommand())
	return command.New(cmd, opts.AddFlags, func(ctx context.Context) error {
		completed, err := opts.Complete()
		if err != nil {
			return err
		}
		if errs := completed.Validate(); len(errs) > 0 {
			return utilerrors.NewAggregate(errs)
		}
		// This process is the server's own: its feature gates are the
		// server's.
		if err := completed.ApplyFeatureGates(); err != nil {
			return err
		}
		ctx = klog.NewContext(ctx, klog.Background().WithName("cache-server"))
		logger := klog.FromContext(ctx)
		// And its memory limit: the Go runtime's follows the server's.
		goLimit, limit, source, err := completed.ApplyMemoryLimit()
		if err != nil {
			return err
		}
		logger.Info("Memory limit", "limitBytes", limit, "source", source, "goMemoryLimitBytes", goLimit)
		// And its collector's target, chosen for a cache.
		gcPercent, gcSource := completed.ApplyGCPercent()
		whileStarting := gcPercent
		if gcPercent > 0 {
			whileStarting = max(gcPercent, options.StartGCPercent)
		}
		logger.Info("Garbage collector target", "gogc", gcPercent, "whileStarting", whileStarting, "source", gcSource)
		if completed.Limits.ReturnMemoryAtRest {
			// The process's memory is the server's: once a burst of
			// writes, a fill or LISTs is over, it returns what is free.
			rest, stop := context.WithCancel(ctx)
			done := make(chan struct{})
			go func() { defer close(done); memreturn.New().Run(rest) }()
			defer func() { stop(); <-done }()
		}
		for _, f := range completed.IgnoredFlags {
			logger.Info("Flag accepted for compatibility with kcp's cache-server has no effect", "flag", f.Name, "value", f.Value, "reason", f.Reason)
		}
		cfg, err := server.NewConfig(completed)
		if err != nil {
			return err
		}
		srv, err := cfg.Complete().New(ctx)
		if err != nil {
			return err
		}
		defer srv.Close()
		// The start's collector target holds until the watch caches are
		// filled (options.StartGCPercent).
		rest, stopWaiting := context.WithCancel(ctx)
		waited := make(chan struct{})
		go func() { defer close(waited); restAfterStart(rest, srv, gcPercent) }()
		defer func() { stopWaiting(); <-waited }()
		if path := srv.KubeconfigPath(); path != "" {
			logger.Info("Serving", "admin-kubeconfig", path,
				"example", fmt.Sprintf("kubectl --kubeconfig %s --server %s/services/cache/shards/amber/clusters/root get apiexports", path, srv.AdminConfig().Host))
		} else {
			logger.Info("Serving without a root directory: no admin kubeconfig; clients authenticate with --client-ca-file or --token-auth-file identities", "address", srv.AdminConfig().Host)
		}
		return srv.PrepareRun().Run(ctx)
	})
}
