package app

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/klog/v2"

	"github.com/kcp-cache/kcp-cache/cache/options"
	"github.com/kcp-cache/kcp-cache/cache/server"
	"github.com/kcp-cache/kcp-cache/examples/internal/command"
)

// runExportKCPLayout exports the data of the server opts describe and
// reports it on out.
func runExportKCPLayout(ctx context.Context, opts *options.Options, out io.Writer) error {
	completed, err := opts.Complete()
	if err != nil {
		return err
	}
	if errs := completed.Validate(); len(errs) > 0 {
		return utilerrors.NewAggregate(errs)
	}
	report, removed, err := server.ExportKCPLayout(ctx, completed)
	if err != nil {
		return err
	}
	files := "none"
	if len(removed) > 0 {
		files = strings.Join(removed, ", ")
	}
	_, err = fmt.Fprintf(out, "Exported to kcp's cache-server's layout: %d objects moved, %d already in it, %d superseded by a later write, "+
		"%d keys only this server uses removed (CRDs, heartbeats, bookkeeping), %d keys in neither layout left as they were%s; files removed from the root directory: %s.\n",
		report.Moved, report.InPlace, report.Superseded, report.Removed, report.Skipped, examples(report.SkippedExamples), files)
	return err
}

func examples(keys []string) string {
	if len(keys) == 0 {
		return ""
	}
	return " (" + strings.Join(keys, ", ") + ")"
}

// newExportKCPLayoutCommand returns cache-server export-kcp-layout.
func newExportKCPLayoutCommand() *cobra.Command {
	opts := options.NewOptions()
	cmd := &cobra.Command{
		Use:   "export-kcp-layout [the server's flags]",
		Short: "Prepare a stopped server's data for kcp's cache-server",
		Long: `export-kcp-layout prepares the data of a stopped cache server for kcp's own
cache-server, offline: stop the server, run this with the server's own flags
(the same root directory, etcd and ports), then start kcp's cache-server on the
same data. It moves every object into the key layout kcp's cache-server reads,
and removes what only this server uses: its CRDs (kcp's cache-server declares
its own at every start), the shards' heartbeats, its bookkeeping in etcd, and
its files in the root directory but the serving certificate. Without it, kcp's
cache-server serves empty partitions until every shard has pushed its objects
again, and this server's keys stay behind in etcd.

The other way needs no step: this server moves kcp's layout into its own at
every start. See "Moving from kcp's cache-server, and back" in
docs/operations.md.`,
		Args: cobra.NoArgs,
	}
	return command.New(cmd, opts.AddFlags, func(ctx context.Context) error {
		ctx = klog.NewContext(ctx, klog.Background().WithName("export-kcp-layout"))
		return runExportKCPLayout(ctx, opts, cmd.OutOrStdout())
	})
}
