package backupfile

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"

	"github.com/kcp-cache/kcp-cache/cache/server/embeddedetcd"
	"github.com/kcp-cache/kcp-cache/cache/server/embeddedetcd/etcdtest"

	"github.com/kcp-cache/kcp-cache/cache/server/backup"
)

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// serve serves h and returns a client configuration of it.
func serve(t *testing.T, h http.Handler) *rest.Config {
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	return &rest.Config{Host: ts.URL}
}

// putKeys writes n keys below prefix and returns the last write's revision.
func putKeys(ctx context.Context, t *testing.T, c *clientv3.Client, prefix string, n int) int64 {
	t.Helper()
	var rev int64
	for i := range n {
		resp, err := c.Put(ctx, fmt.Sprintf("%s/%02d", prefix, i), "v")
		if err != nil {
			t.Fatal(err)
		}
		rev = resp.Header.Revision
	}
	return rev
}

// keysBelow lists the keys below prefix and returns the answer's header.
func keysBelow(ctx context.Context, t *testing.T, c *clientv3.Client, prefix string) ([]string, *clientv3.GetResponse) {
	t.Helper()
	resp, err := c.Get(ctx, prefix+"/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, kv := range resp.Kvs {
		keys = append(keys, string(kv.Key))
	}
	return keys, resp
}

// startOn starts a member on dir and returns a client of it.
func startOn(ctx context.Context, t *testing.T, dir string) (*embeddedetcd.Server, *clientv3.Client) {
	t.Helper()
	m, err := embeddedetcd.Start(ctx, embeddedetcd.Config{Directory: dir, UnsafeNoFsync: true, MaintenanceInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m, etcdtest.Dial(t, nil, m.ClientURL())
}

// A backup taken through Handler holds every key written before it and none
// written after; restored, it is a member of a new cluster (so a new cache
// epoch) whose revisions continue far above the backup's, every older one
// compacted. A second restore of the same backup is yet another cluster.
// Restore never touches a directory a running member holds, and replaces
// one that holds anything only with Force.
func TestRestoredBackupIsANewClusterWithTheBackupsKeys(t *testing.T) {
	ctx := testContext(t)
	src := etcdtest.Client(t, embeddedetcd.Config{})
	lastBefore := putKeys(ctx, t, src, "/before", 20)
	_, srcResp := keysBelow(ctx, t, src, "/before")

	path := filepath.Join(t.TempDir(), "cache.backup")
	info, err := Save(ctx, serve(t, backup.Handler(src)), path)
	if err != nil {
		t.Fatal(err)
	}
	if info.Revision < lastBefore || info.Keys < 20 {
		t.Fatalf("backup at revision %d with %d keys; want at least revision %d and 20 keys", info.Revision, info.Keys, lastBefore)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 || st.Size() != info.Size {
		t.Fatalf("backup file mode %v size %d, want 0600 and %d", st.Mode().Perm(), st.Size(), info.Size)
	}
	if entries, _ := os.ReadDir(filepath.Dir(path)); len(entries) != 1 {
		t.Fatalf("the backup's directory holds %d entries, want the backup alone", len(entries))
	}
	putKeys(ctx, t, src, "/after", 1)

	dir := filepath.Join(t.TempDir(), "etcd-server")
	if err := Restore(ctx, RestoreConfig{Snapshot: path, Directory: dir}); err != nil {
		t.Fatal(err)
	}
	m, restored := startOn(ctx, t, dir)
	keys, resp := keysBelow(ctx, t, restored, "/before")
	if len(keys) != 20 {
		t.Errorf("restored member holds %d keys below /before, want 20", len(keys))
	}
	if after, _ := keysBelow(ctx, t, restored, "/after"); len(after) != 0 {
		t.Errorf("restored member holds %v, written after the backup", after)
	}
	firstCluster := resp.Header.ClusterId
	if firstCluster == srcResp.Header.ClusterId {
		t.Errorf("restored member kept the cluster ID %x of the backed-up one", firstCluster)
	}
	if resp.Header.Revision < info.Revision+RevisionBump {
		t.Errorf("restored member at revision %d, want at least %d (backup's %d + %d)", resp.Header.Revision, info.Revision+RevisionBump, info.Revision, RevisionBump)
	}
	watchCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	wresp := <-restored.Watch(watchCtx, "/before/", clientv3.WithPrefix(), clientv3.WithRev(lastBefore))
	if wresp.CompactRevision == 0 {
		t.Errorf("a watch from revision %d, seen before the restore: %v, compact revision 0; want it compacted", lastBefore, wresp.Err())
	}

	if err := Restore(ctx, RestoreConfig{Snapshot: path, Directory: dir, Force: true}); !errors.Is(err, ErrDirectoryInUse) {
		t.Fatalf("restore into the directory of a running member: %v, want %v", err, ErrDirectoryInUse)
	}
	m.Close()
	if err := Restore(ctx, RestoreConfig{Snapshot: path, Directory: dir}); err == nil || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("restore into a directory with data, without Force: %v; want a refusal naming --force", err)
	}
	if err := Restore(ctx, RestoreConfig{Snapshot: path, Directory: dir, Force: true}); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(filepath.Dir(dir)); len(entries) != 1 {
		t.Errorf("the data directory's parent holds %d entries after a forced restore, want the directory alone", len(entries))
	}
	_, again := startOn(ctx, t, dir)
	keys, resp = keysBelow(ctx, t, again, "/before")
	if len(keys) != 20 || resp.Header.ClusterId == firstCluster || resp.Header.ClusterId == srcResp.Header.ClusterId {
		t.Errorf("second restore: %d keys, cluster %x (first restore %x, source %x); want 20 keys in a cluster of its own",
			len(keys), resp.Header.ClusterId, firstCluster, srcResp.Header.ClusterId)
	}
}

// Verify takes only a whole snapshot: one byte changed or the end cut off
// fails it, and Save writes nothing when what it received fails it.
func TestVerifyRefusesADamagedOrShortSnapshot(t *testing.T) {
	ctx := testContext(t)
	src := etcdtest.Client(t, embeddedetcd.Config{})
	putKeys(ctx, t, src, "/k", 5)
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	if _, err := Save(ctx, serve(t, backup.Handler(src)), good); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	flipped := bytes.Clone(data)
	flipped[len(flipped)/2] ^= 0xff
	for name, content := range map[string][]byte{
		"a byte changed":         flipped,
		"cut at a page boundary": data[:len(data)-4096],
		"the hash cut off":       data[:len(data)-32],
	} {
		p := filepath.Join(dir, strings.ReplaceAll(name, " ", "-"))
		if err := os.WriteFile(p, content, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := Verify(p); err == nil {
			t.Errorf("%s: Verify accepted it", name)
		}
	}

	// A server whose stream ends early, cleanly: Save refuses and leaves
	// nothing behind.
	short := snapshotterFunc(func(context.Context) (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data[:len(data)-4096])), nil
	})
	target := filepath.Join(t.TempDir(), "backup")
	if _, err := Save(ctx, serve(t, backup.Handler(short)), target); err == nil {
		t.Fatal("Save of a short stream succeeded")
	}
	if entries, _ := os.ReadDir(filepath.Dir(target)); len(entries) != 0 {
		t.Errorf("Save of a short stream left %d files", len(entries))
	}
	// A stream that fails midway: the connection is cut, Save fails.
	broken := snapshotterFunc(func(context.Context) (io.ReadCloser, error) {
		return io.NopCloser(io.MultiReader(bytes.NewReader(data[:len(data)/2]), errReader{})), nil
	})
	if _, err := Save(ctx, serve(t, backup.Handler(broken)), target); err == nil {
		t.Fatal("Save of a broken stream succeeded")
	}
	if entries, _ := os.ReadDir(filepath.Dir(target)); len(entries) != 0 {
		t.Errorf("Save of a broken stream left %d files", len(entries))
	}
}

// A server without a member of its own answers a Status that says what to
// do instead, and Save returns it as the server's error.
func TestUnavailableAnswersAStatus(t *testing.T) {
	ctx := testContext(t)
	cfg := serve(t, backup.Unavailable("use etcdctl snapshot save against that etcd"))
	target := filepath.Join(t.TempDir(), "backup")
	_, err := Save(ctx, cfg, target)
	if apierrors.ReasonForError(err) != backup.ReasonExternalEtcd || !strings.Contains(err.Error(), "etcdctl") {
		t.Fatalf("Save from a server on an external etcd: %v (reason %q), want reason %s with the message", err, apierrors.ReasonForError(err), backup.ReasonExternalEtcd)
	}
	if status, ok := err.(apierrors.APIStatus); !ok || status.Status().Code != http.StatusNotImplemented {
		t.Fatalf("Save from a server on an external etcd: %#v, want a 501 Status", err)
	}
	if _, err := os.Stat(target); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Save wrote %s after a refusal: %v", target, err)
	}
	resp, err := http.Post(cfg.Host+"/", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("POST answered %d, want 405", resp.StatusCode)
	}
}

// An etcd that fails before the first byte of its snapshot gets a 503
// Status (retry), not a 200 with nothing after it.
func TestHandlerAnswers503WhenEtcdFailsAtOnce(t *testing.T) {
	ctx := testContext(t)
	for name, snap := range map[string]snapshotterFunc{
		"no stream": func(context.Context) (io.ReadCloser, error) { return nil, errors.New("etcdserver: no leader") },
		"an empty stream": func(context.Context) (io.ReadCloser, error) {
			return io.NopCloser(bytes.NewReader(nil)), nil
		},
		"a failing stream": func(context.Context) (io.ReadCloser, error) { return io.NopCloser(errReader{}), nil },
	} {
		_, err := Save(ctx, serve(t, backup.Handler(snap)), filepath.Join(t.TempDir(), "backup"))
		if !apierrors.IsServiceUnavailable(err) {
			t.Errorf("%s: %v, want 503", name, err)
		}
	}
}

// snapshotterFunc is a Snapshotter whose linearizable read always succeeds
// and whose snapshot is the function's.
type snapshotterFunc func(context.Context) (io.ReadCloser, error)

func (f snapshotterFunc) Get(context.Context, string, ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	return &clientv3.GetResponse{}, nil
}

func (f snapshotterFunc) Snapshot(ctx context.Context) (io.ReadCloser, error) { return f(ctx) }

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("etcd went away") }
