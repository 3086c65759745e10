package app

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/klog/v2"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/options"
	"github.com/kcp-cache/kcp-cache/cache/server"
	"github.com/kcp-cache/kcp-cache/examples/internal/command"
)

// ExportKCPLayoutOptions are the flags of cache-server export-kcp-layout
// beside the server's own, which it takes with the server's values.
type ExportKCPLayoutOptions struct {
	// KcpRelease is the release line of the kcp cache-server that takes the
	// data over.
	KcpRelease string
}

// NewExportKCPLayoutOptions returns the defaults: kcp's latest release line.
func NewExportKCPLayoutOptions() *ExportKCPLayoutOptions {
	return &ExportKCPLayoutOptions{KcpRelease: string(kcpcache.DefaultKcpRelease)}
}

// AddFlags adds the command's own flags to fss.
func (o *ExportKCPLayoutOptions) AddFlags(fss *cliflag.NamedFlagSets) {
	fss.FlagSet("Export").StringVar(&o.KcpRelease, "kcp-release", o.KcpRelease,
		fmt.Sprintf("The release line of the kcp cache-server that takes the data over, one of %v: the CRDs of types only the other line declares are removed when they hold no objects.", kcpcache.KcpReleases()))
}

// runExportKCPLayout exports the data of the server opts describe, for
// kcp's cache-server of release, and reports it on out.
func runExportKCPLayout(ctx context.Context, opts *options.Options, release string, out io.Writer) error {
	if !slices.Contains(kcpcache.KcpReleases(), kcpcache.KcpRelease(release)) {
		return fmt.Errorf("--kcp-release=%q: want one of %v", release, kcpcache.KcpReleases())
	}
	completed, err := opts.Complete()
	if err != nil {
		return err
	}
	if errs := completed.Validate(); len(errs) > 0 {
		return utilerrors.NewAggregate(errs)
	}
	report, removed, err := server.ExportKCPLayout(ctx, completed, kcpcache.KcpRelease(release))
	if err != nil {
		return err
	}
	files := "none"
	if len(removed) > 0 {
		files = strings.Join(removed, ", ")
	}
	_, err = fmt.Fprintf(out, "Exported to kcp's cache-server's layout: %d objects moved, %d already in it, %d superseded by a later write, "+
		"%d keys only this server uses removed (heartbeats, bookkeeping, CRDs of types kcp's cache-server does not declare), %d keys in neither layout left as they were%s; files removed from the root directory: %s.\n",
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
	opts, export := options.NewOptions(), NewExportKCPLayoutOptions()
	cmd := &cobra.Command{
		Use:   "export-kcp-layout [the server's flags]",
		Short: "Prepare a stopped server's data for kcp's cache-server",
		Long: `export-kcp-layout prepares the data of a stopped cache server for kcp's own
cache-server, offline: stop the server, run this with the server's own flags
(the same root directory, etcd and ports), then start kcp's cache-server on the
same data. It moves every object into the key layout kcp's cache-server reads,
and removes what only this server uses: the shards' heartbeats, its bookkeeping
in etcd, the CRDs of types kcp's cache-server of --kcp-release does not declare
(when they hold no objects; kcp's cache-server overwrites the others with its
own declarations at start), and its files in the root directory but the
serving certificate. Without it, kcp's
cache-server serves empty partitions until every shard has pushed its objects
again, and this server's keys stay behind in etcd.

The other way needs no step: this server moves kcp's layout into its own at
every start. See "Moving from kcp's cache-server, and back" in
docs/operations.md.`,
		Args: cobra.NoArgs,
	}
	addFlags := func(fss *cliflag.NamedFlagSets) {
		export.AddFlags(fss)
		opts.AddFlags(fss)
	}
	return command.New(cmd, addFlags, func(ctx context.Context) error {
		ctx = klog.NewContext(ctx, klog.Background().WithName("export-kcp-layout"))
		return runExportKCPLayout(ctx, opts, export.KcpRelease, cmd.OutOrStdout())
	})
}
