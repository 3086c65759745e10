package app

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/klog/v2"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
	"github.com/kcp-cache/kcp-cache/examples/internal/command"
)

// parse parses args with the flag sets addFlags fills, as the subcommand
// does (the cobra command itself can run once per process: it installs the
// signal handler).
func parse(t *testing.T, addFlags func(*cliflag.NamedFlagSets), args ...string) {
	t.Helper()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	for _, set := range command.FlagSets(addFlags).FlagSets {
		fs.AddFlagSet(set)
	}
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
}

// Both subcommands hang off the server's command.
func TestBackupAndRestoreAreSubcommands(t *testing.T) {
	for _, name := range []string{"backup", "restore"} {
		cmd, _, err := NewCommand().Find([]string{name, "--help"})
		if err != nil || cmd.Name() != name {
			t.Errorf("cache-server %s: found %v, %v", name, cmd.Name(), err)
		}
	}
}

// cache-server backup and restore as an operator runs them: a backup with
// the admin kubeconfig the server wrote into its root directory, the server
// stopped, a restore into its data directory (refused until --force, since
// the directory holds the data the backup replaces), the server started
// again: it serves what the backup held, not what came after, in a new
// epoch.
func TestBackupAndRestoreCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("a restart on restored data: skipped with -short")
	}
	srv := cachetest.StartServer(t, cachetest.OwnEmbeddedEtcd(nil))
	root := srv.Options().RootDirectory
	ctx, cancel := context.WithTimeout(klog.NewContext(context.Background(), klog.Background()), time.Minute)
	defer cancel()
	gvr := schema.GroupVersionResource{Group: "apis.kcp.io", Version: "v1alpha1", Resource: "apiexports"}
	exports := cachetest.Dynamic(t, srv.Config(), kcpcache.ScopedPathPrefix(kcpcache.Scope{Shard: "amber", Cluster: "root"})).Resource(gvr)
	create := func(name string) {
		t.Helper()
		u := &unstructured.Unstructured{}
		u.SetAPIVersion("apis.kcp.io/v1alpha1")
		u.SetKind("APIExport")
		u.SetName(name)
		if _, err := exports.Create(ctx, u, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	create("before")
	epochBefore := srv.Server().Epoch()

	file := filepath.Join(t.TempDir(), "cache.backup")
	b := NewBackupOptions()
	parse(t, b.AddFlags, "--root-directory", root, "--to", file)
	var out bytes.Buffer
	if err := b.Run(ctx, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "verified") || !strings.Contains(out.String(), epochBefore) {
		t.Errorf("backup reported %q; want it verified, in epoch %s", out.String(), epochBefore)
	}
	create("after")

	if err := srv.Halt(); err != nil {
		t.Fatal(err)
	}
	r := NewRestoreOptions()
	parse(t, r.AddFlags, "--root-directory", root, "--from", file)
	if err := r.Run(ctx, &out); err == nil || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("restore into the server's data directory without --force: %v; want a refusal naming --force", err)
	}
	parse(t, r.AddFlags, "--root-directory", root, "--from", file, "--force")
	if err := r.Run(ctx, &out); err != nil {
		t.Fatal(err)
	}
	if err := srv.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := exports.Get(ctx, "before", metav1.GetOptions{}); err != nil {
		t.Errorf("the object written before the backup, after the restore: %v", err)
	}
	if _, err := exports.Get(ctx, "after", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the object written after the backup, after the restore: %v; want 404", err)
	}
	if epoch := srv.Server().Epoch(); epoch == epochBefore {
		t.Errorf("the restored server kept the epoch %s", epoch)
	}
}
