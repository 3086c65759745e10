package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"

	"github.com/spf13/cobra"
	"k8s.io/client-go/tools/clientcmd"
	cliflag "k8s.io/component-base/cli/flag"

	"github.com/kcp-cache/kcp-cache/cache/options"
	"github.com/kcp-cache/kcp-cache/cache/server"
	"github.com/kcp-cache/kcp-cache/cache/server/backup/backupfile"
	"github.com/kcp-cache/kcp-cache/examples/internal/command"
)

// BackupOptions are the flags of cache-server backup.
type BackupOptions struct {
	// To is the file the backup is written to.
	To string
	// Kubeconfig reaches the running server as system:masters; empty: the
	// admin kubeconfig in RootDirectory.
	Kubeconfig    string
	RootDirectory string
}

// NewBackupOptions returns the defaults: the server's default root
// directory, whose admin kubeconfig is used.
func NewBackupOptions() *BackupOptions {
	return &BackupOptions{RootDirectory: options.DefaultRootDirectory}
}

// AddFlags adds the backup command's flags to fss.
func (o *BackupOptions) AddFlags(fss *cliflag.NamedFlagSets) {
	fs := fss.FlagSet("Backup")
	fs.StringVar(&o.To, "to", o.To,
		"File to write the backup to (required): a snapshot of the server's embedded etcd, in etcd's format (etcdutl snapshot status reads it). Written under a temporary name next to it, verified (its SHA-256 and the database's consistency), then renamed, mode 0600; an existing file is replaced.")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig,
		"Kubeconfig that reaches the running server as system:masters. Default: <root-directory>/"+server.KubeconfigFileName+", the admin kubeconfig the server writes.")
	fs.StringVar(&o.RootDirectory, "root-directory", o.RootDirectory,
		"The server's --root-directory, where its admin kubeconfig is found when --kubeconfig is not given.")
}

// kubeconfig is the file that reaches the server.
func (o *BackupOptions) kubeconfig() (string, error) {
	if o.Kubeconfig != "" {
		return o.Kubeconfig, nil
	}
	if o.RootDirectory == "" {
		return "", errors.New("--kubeconfig is required without --root-directory (a server without a root directory writes no admin kubeconfig)")
	}
	return filepath.Join(o.RootDirectory, server.KubeconfigFileName), nil
}

// Run takes the backup and reports it on out.
func (o *BackupOptions) Run(ctx context.Context, out io.Writer) error {
	if o.To == "" {
		return errors.New("--to is required: the file to write the backup to")
	}
	path, err := o.kubeconfig()
	if err != nil {
		return err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return fmt.Errorf("loading %s: %w", path, err)
	}
	info, err := backupfile.Save(ctx, cfg, o.To)
	if err != nil {
		return fmt.Errorf("backup through %s: %w", cfg.Host, err)
	}
	_, err = fmt.Fprintf(out, "Backup written to %s and verified: etcd revision %d, %d keys, %d bytes, cache epoch %s.\n",
		o.To, info.Revision, info.Keys, info.Size, info.Epoch)
	return err
}

// newBackupCommand returns cache-server backup.
func newBackupCommand() *cobra.Command {
	o := NewBackupOptions()
	cmd := &cobra.Command{
		Use:   "backup --to FILE",
		Short: "Take a backup of a running cache server's embedded etcd",
		Long: `backup asks the running cache server (as system:masters, with its admin
kubeconfig by default) for a consistent snapshot of its embedded etcd, taken
online: it holds every write the server had acknowledged when it was asked.
The file is verified before the command succeeds. A server on an external etcd
(--etcd-servers) refuses: back that etcd up with etcdctl snapshot save.
Restore the file with cache-server restore (see docs/storage.md).`,
		Args: cobra.NoArgs,
	}
	return command.New(cmd, o.AddFlags, func(ctx context.Context) error { return o.Run(ctx, cmd.OutOrStdout()) })
}
