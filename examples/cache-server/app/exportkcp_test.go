package app

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/klog/v2"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/options"
	"github.com/kcp-cache/kcp-cache/cache/server"
	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
)

// cache-server export-kcp-layout, run with the stopped server's flags,
// moves its objects into kcp's layout and removes what only the server
// uses, its files included but the serving certificate; run again, it
// finds everything in place.
func TestExportKCPLayoutCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("a server, then its etcd twice: skipped with -short")
	}
	srv := cachetest.StartServer(t, cachetest.OwnEmbeddedEtcd(nil))
	root := srv.Options().RootDirectory
	ctx, cancel := context.WithTimeout(klog.NewContext(context.Background(), klog.Background()), time.Minute)
	defer cancel()
	gvr := schema.GroupVersionResource{Group: "apis.kcp.io", Version: "v1alpha2", Resource: "apiexports"}
	exports := cachetest.Dynamic(t, srv.Config(), kcpcache.ScopedPathPrefix(kcpcache.Scope{Shard: "amber", Cluster: "root"})).Resource(gvr)
	for _, name := range []string{"one", "two"} {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion(gvr.GroupVersion().String())
		u.SetKind("APIExport")
		u.SetName(name)
		if _, err := exports.Create(ctx, u, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := srv.Halt(); err != nil {
		t.Fatal(err)
	}

	export := func() string {
		t.Helper()
		opts := options.NewOptions()
		parse(t, opts.AddFlags, "--root-directory", root, "--embedded-etcd-client-port=0", "--embedded-etcd-peer-port=0")
		var out bytes.Buffer
		if err := runExportKCPLayout(ctx, opts, "v0.32", &out); err != nil {
			t.Fatal(err)
		}
		return out.String()
	}
	out := export()
	if !strings.Contains(out, "2 objects moved") || !strings.Contains(out, server.KubeconfigFileName) {
		t.Errorf("export reported %q; want the 2 objects moved and the admin kubeconfig removed", out)
	}
	for _, name := range []string{server.KubeconfigFileName, "admin.token", "epoch.json", server.EmbeddedEtcdCertsDirName} {
		if _, err := os.Stat(filepath.Join(root, name)); !os.IsNotExist(err) {
			t.Errorf("%s after the export: %v; want it removed", name, err)
		}
	}
	if _, err := os.Stat(filepath.Join(root, "apiserver.crt")); err != nil {
		t.Errorf("the serving certificate after the export: %v; want it kept", err)
	}
	// The heartbeats' CRD and kcp main's two types, unused by kcp v0.32, went; the marker too.
	if !strings.Contains(out, "4 keys only this server uses removed") {
		t.Errorf("export reported %q; want 4 keys removed", out)
	}
	if out := export(); !strings.Contains(out, "0 objects moved") || !strings.Contains(out, "0 keys only this server uses removed") {
		t.Errorf("export again reported %q; want nothing moved or removed", out)
	}
}
