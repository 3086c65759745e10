package integration_test

import (
	"net/http"
	"path/filepath"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
)

// epochOf asks the server something (an object that does not exist: errors
// carry the epoch too) and returns the epoch its response announces.
func epochOf(t *testing.T, srv *cachetest.Server) string {
	t.Helper()
	cfg := srv.Config()
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(testContext(t), http.MethodGet,
		cfg.Host+kcpcache.ScopedPath(kcpcache.Scope{Shard: "amber", Cluster: "root"}, "/apis/apis.kcp.io/v1alpha1/apiexports/missing"), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("GET of a missing object: %s, want 404", resp.Status)
	}
	epoch := resp.Header.Get(kcpcache.EpochHeader)
	if epoch == "" {
		t.Fatalf("response without the %s header", kcpcache.EpochHeader)
	}
	if got := srv.Server().Epoch(); got != epoch {
		t.Fatalf("header says epoch %q, the server %q", epoch, got)
	}
	return epoch
}

func TestEpochOutlivesARestart(t *testing.T) {
	t.Parallel()
	srv := cachetest.StartServer(t)
	before := epochOf(t, srv)
	srv.RestartServer(t)
	if after := epochOf(t, srv); after != before {
		t.Fatalf("a restart on the same etcd changed the epoch from %q to %q", before, after)
	}
}

func TestEpochChangesWithAnEmptyEtcd(t *testing.T) {
	t.Parallel()
	srv := cachetest.StartServer(t)
	before := epochOf(t, srv)
	srv.RestartWithEtcdDataForTest(t, cachetest.WipeDir)
	if after := epochOf(t, srv); after == before {
		t.Fatalf("a new etcd kept epoch %q", before)
	}
}

// A data directory copied back from a backup has etcd's cluster ID and the
// marker of its time; only its revision, lower than the server has seen,
// tells it apart from a restart.
func TestEpochChangesWhenEtcdIsRestoredFromACopy(t *testing.T) {
	if testing.Short() {
		t.Skip("long scenario (restarts on a copied etcd directory): skipped with -short")
	}
	t.Parallel()
	srv := cachetest.StartServer(t)
	ctx := testContext(t)
	backup := filepath.Join(t.TempDir(), "etcd-backup")
	if err := srv.StopEtcdAndCopyData(ctx, backup); err != nil {
		t.Fatal(err)
	}
	before := epochOf(t, srv)
	for _, name := range []string{"after-backup-1", "after-backup-2"} {
		if _, err := dyn(t, srv, "amber", "root").Resource(apiExports).Create(ctx, apiExport(name, nil), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	srv.RestartWithEtcdDataForTest(t, func(dir string) error { return cachetest.CopyDir(backup, dir) })
	after := epochOf(t, srv)
	if after == before {
		t.Fatalf("etcd restored from an older copy kept epoch %q", before)
	}
	if _, err := dyn(t, srv, "amber", "root").Resource(apiExports).Get(ctx, "after-backup-1", metav1.GetOptions{}); err == nil {
		t.Fatal("the object created after the backup survived the restore; the test restored nothing")
	}
	// The new epoch is the one the restored etcd keeps from now on.
	srv.RestartServer(t)
	if again := epochOf(t, srv); again != after {
		t.Fatalf("a restart after the restore changed the epoch again: %q, then %q", after, again)
	}
}
