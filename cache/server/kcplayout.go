package server

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/options"
	"github.com/kcp-cache/kcp-cache/cache/server/authentication"
	"github.com/kcp-cache/kcp-cache/cache/server/bootstrap"
	"github.com/kcp-cache/kcp-cache/cache/server/embeddedetcd"
	"github.com/kcp-cache/kcp-cache/cache/server/epoch"
	"github.com/kcp-cache/kcp-cache/cache/server/kcplayout"
)

// migrateKCPLayout moves the objects that kcp's cache-server left below
// prefix into this server's layout, so that a cache started on kcp's data
// serves it (docs/operations.md, "Moving from kcp's cache-server, and
// back").
func migrateKCPLayout(ctx context.Context, client clientv3.KV, prefix string) error {
	logger := klog.FromContext(ctx).WithName("kcp-layout")
	start := time.Now()
	report, err := kcplayout.Migrate(ctx, client, prefix)
	if err != nil {
		return fmt.Errorf("moving the objects of kcp's cache-server's layout into this server's: %w", err)
	}
	kv := append(report.KeysAndValues(), "duration", time.Since(start).Round(time.Millisecond))
	switch {
	case report.Changed():
		logger.Info("Moved the objects of kcp's cache-server's layout into this server's", kv...)
	case report.Skipped > 0:
		logger.Info("Keys in neither kcp's cache-server's layout nor this server's were left as they are", kv...)
	default:
		logger.V(2).Info("Every object is in this server's layout", kv...)
	}
	return nil
}

// ExportKCPLayout prepares the data of a stopped server for kcp's
// cache-server of the release line release (kcplayout.Export): it starts
// the embedded etcd alone, when opts have one, on the server's data and
// ports, brings every object into kcp's layout and deletes what only this
// server uses, the CRDs of the types kcp's cache-server of that line does
// not declare among them (the heartbeats', the other line's) when they
// hold no objects; then it removes the files only this server uses from
// the root directory (the epoch, the admin token and kubeconfig, the
// embedded etcd's certificates). The serving certificate stays: kcp's
// cache-server serves with it too, and the shards trust it. It returns
// what it did, and the files it removed.
func ExportKCPLayout(ctx context.Context, opts options.CompletedOptions, release kcpcache.KcpRelease) (kcplayout.Report, []string, error) {
	if opts.EmbeddedEtcd.Enabled && opts.EmbeddedEtcd.Storage == options.StorageMemory {
		return kcplayout.Report{}, nil, fmt.Errorf("--storage=%s keeps no data to export", options.StorageMemory)
	}
	root := opts.RootDirectory
	etcdOpts := *opts.Etcd
	var derived derivedConfig
	if err := applyEmbeddedEtcd(opts.EmbeddedEtcd, root, &etcdOpts, &derived); err != nil {
		return kcplayout.Report{}, nil, err
	}
	ours := map[string]bool{bootstrap.HeartbeatCRD().Name: true}
	for _, t := range kcpcache.KcpTypes() {
		if !t.UsedBy(release) {
			ours[t.Name()] = true
		}
	}
	report, err := exportKCPLayout(ctx, derived.embeddedEtcd, etcdOpts.StorageConfig, func(name string) bool { return ours[name] })
	if err != nil || root == "" {
		return report, nil, err
	}
	removed, err := removeOwnFiles(root)
	return report, removed, err
}

func exportKCPLayout(ctx context.Context, embedded *embeddedetcd.Config, storage storagebackend.Config, removeCRD func(string) bool) (kcplayout.Report, error) {
	if embedded != nil {
		etcd, err := embeddedetcd.Start(ctx, *embedded)
		if err != nil {
			return kcplayout.Report{}, err
		}
		defer etcd.Close()
	}
	client, err := newEtcdClient(storage.Transport)
	if err != nil {
		return kcplayout.Report{}, err
	}
	defer func() { _ = client.Close() }()
	return kcplayout.Export(ctx, client, storage.Prefix, removeCRD)
}

// removeOwnFiles removes from root what only this server writes there. The
// admin kubeconfig goes only if it holds this server's admin token: kcp's
// test environment writes its shards' kubeconfig under the same name.
func removeOwnFiles(root string) ([]string, error) {
	var removed []string
	token, err := os.ReadFile(filepath.Join(root, authentication.AdminTokenFileName))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	kubeconfig := filepath.Join(root, KubeconfigFileName)
	if len(token) > 0 {
		if cfg, err := clientcmd.LoadFromFile(kubeconfig); err == nil {
			for _, user := range cfg.AuthInfos {
				if user.Token != "" && user.Token == strings.TrimSpace(string(token)) {
					if err := os.Remove(kubeconfig); err != nil {
						return removed, err
					}
					removed = append(removed, KubeconfigFileName)
					break
				}
			}
		}
	}
	for _, name := range []string{epoch.FileName, authentication.AdminTokenFileName, EmbeddedEtcdCertsDirName} {
		path := filepath.Join(root, name)
		if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err := os.RemoveAll(path); err != nil {
			return removed, err
		}
		removed = append(removed, name)
	}
	return removed, nil
}
