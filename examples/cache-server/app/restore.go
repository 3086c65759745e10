package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"

	"github.com/spf13/cobra"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/klog/v2"

	"github.com/kcp-cache/kcp-cache/cache/options"
	"github.com/kcp-cache/kcp-cache/cache/server/backup/backupfile"
	"github.com/kcp-cache/kcp-cache/examples/internal/command"
)

// RestoreOptions are the flags of cache-server restore.
type RestoreOptions struct {
	// From is the backup file.
	From string
	// RootDirectory and EmbeddedEtcdDirectory name the data directory as
	// the server's flags of the same names do.
	RootDirectory         string
	EmbeddedEtcdDirectory string
	// Force replaces a data directory that holds anything.
	Force bool
}

// NewRestoreOptions returns the server's defaults for the directories.
func NewRestoreOptions() *RestoreOptions {
	return &RestoreOptions{RootDirectory: options.DefaultRootDirectory}
}

// AddFlags adds the restore command's flags to fss.
func (o *RestoreOptions) AddFlags(fss *cliflag.NamedFlagSets) {
	fs := fss.FlagSet("Restore")
	fs.StringVar(&o.From, "from", o.From,
		"Backup file to restore (required): one cache-server backup or etcdctl snapshot save wrote. Its SHA-256 and database are verified first.")
	fs.StringVar(&o.RootDirectory, "root-directory", o.RootDirectory,
		"The server's --root-directory: --embedded-etcd-directory is relative to it.")
	fs.StringVar(&o.EmbeddedEtcdDirectory, "embedded-etcd-directory", o.EmbeddedEtcdDirectory,
		"The server's --embedded-etcd-directory, the data directory to restore into; resolved as the server resolves it (default <root-directory>/"+options.DefaultEmbeddedEtcdDirectory+").")
	fs.BoolVar(&o.Force, "force", o.Force,
		"Replace a data directory that is not empty (its data is deleted once the restored one is in place). Never while a server runs on it.")
}

// Run restores the backup and reports it on out.
func (o *RestoreOptions) Run(ctx context.Context, out io.Writer) error {
	if o.From == "" {
		return errors.New("--from is required: the backup file to restore")
	}
	root := o.RootDirectory
	if root != "" {
		var err error
		if root, err = filepath.Abs(root); err != nil {
			return err
		}
	}
	dir, err := options.EmbeddedEtcdDirectory(root, o.EmbeddedEtcdDirectory)
	if err != nil {
		return err
	}
	info, err := backupfile.Verify(o.From)
	if err != nil {
		return err
	}
	if err := backupfile.Restore(ctx, backupfile.RestoreConfig{Snapshot: o.From, Directory: dir, Force: o.Force}); err != nil {
		return err
	}
	_, err = fmt.Fprintf(out, "Restored %s (etcd revision %d, %d keys) into %s. The server started on it serves a new cache epoch; "+
		"its revisions continue above %d, and clients relist.\n", o.From, info.Revision, info.Keys, dir, info.Revision+backupfile.RevisionBump)
	return err
}

// newRestoreCommand returns cache-server restore.
func newRestoreCommand() *cobra.Command {
	o := NewRestoreOptions()
	cmd := &cobra.Command{
		Use:   "restore --from FILE",
		Short: "Restore a backup into the embedded etcd's data directory, the server stopped",
		Long: `restore makes the embedded etcd's data directory out of a backup (cache-server
backup), offline: stop the server first; start it afterwards. The restored
cache starts in a new epoch, so clients relist and mirrors in other regions
hold their copies of its shards' partitions until each shard has pushed its
partition again (see docs/storage.md and docs/regions.md). A directory that
holds anything is replaced only with --force.`,
		Args: cobra.NoArgs,
	}
	return command.New(cmd, o.AddFlags, func(ctx context.Context) error {
		ctx = klog.NewContext(ctx, klog.Background().WithName("restore"))
		return o.Run(ctx, cmd.OutOrStdout())
	})
}
