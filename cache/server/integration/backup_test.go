package integration_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/options"
	"github.com/kcp-cache/kcp-cache/cache/server/authorization"
	"github.com/kcp-cache/kcp-cache/cache/server/backup"
	"github.com/kcp-cache/kcp-cache/cache/server/backup/backupfile"
	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
	"github.com/kcp-cache/kcp-cache/cache/server/mirror"
)

// ackedWrites records the creates of concurrent writers with the time each
// was sent and acknowledged.
type ackedWrites struct {
	mu     sync.Mutex
	writes []ackedWrite
}

type ackedWrite struct {
	name           string
	sent, answered time.Time
}

func (a *ackedWrites) add(w ackedWrite) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.writes = append(a.writes, w)
}

// split returns the names acknowledged before t and those sent after u.
func (a *ackedWrites) split(t, u time.Time) (before, after []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, w := range a.writes {
		if w.answered.Before(t) {
			before = append(before, w.name)
		}
		if w.sent.After(u) {
			after = append(after, w.name)
		}
	}
	return before, after
}

func (a *ackedWrites) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.writes)
}

// TestBackupUnderWritesRestoresIntoANewEpochThatMirrorsHold: a backup of a
// home taken online through its server while a shard writes, then the
// server restored from it. The restored home holds every object
// acknowledged before the backup was asked for and none sent after it
// answered, in a new epoch; its mirror holds the shard's partition as
// docs/regions.md says of a home restored from a backup: consistent reads
// answer 503 HomeRestored, stale reads still have what the shard wrote
// after the backup.
func TestBackupUnderWritesRestoresIntoANewEpochThatMirrorsHold(t *testing.T) {
	if testing.Short() {
		t.Skip("long scenario (several caches in regions, a restore): skipped with -short")
	}
	ctx := testContext(t)
	regions := map[string]*region{}
	for name, r := range cachetest.StartRegions(t, ctx, cachetest.RegionsOptions{OwnEmbeddedEtcd: true}, "a", "c") {
		regions[name] = &region{name: r.Name, srv: r.Srv, opts: r.Opts}
	}
	a, c := regions["a"], regions["c"]
	exports := c.shard(t, "s-c")
	putConvergedHeartbeat(ctx, t, c, "s-c")

	// Four writers create objects in s-c's partition at its home, c.
	var acked ackedWrites
	writeCtx, stopWriting := context.WithCancel(ctx)
	defer stopWriting()
	var writers sync.WaitGroup
	writeErrs := make(chan error, 4)
	for w := range 4 {
		writers.Go(func() {
			for i := 0; writeCtx.Err() == nil; i++ {
				name := fmt.Sprintf("w%d-%03d", w, i)
				sent := time.Now()
				_, err := exports.Create(writeCtx, apiExport(name, nil), metav1.CreateOptions{})
				if writeCtx.Err() != nil {
					return
				}
				if err != nil {
					writeErrs <- fmt.Errorf("creating %s: %w", name, err)
					return
				}
				acked.add(ackedWrite{name: name, sent: sent, answered: time.Now()})
			}
		})
	}
	waitForWrites := func(n int) {
		t.Helper()
		cachetest.Eventually(t, fmt.Sprintf("%d writes acknowledged", n), func(context.Context) error {
			select {
			case err := <-writeErrs:
				return errors.Join(errors.New("a writer failed"), err)
			default:
			}
			if got := acked.count(); got < n {
				return fmt.Errorf("%d acknowledged", got)
			}
			return nil
		})
	}
	waitForWrites(40)

	// The backup, as cache-server backup takes it: through the server, with
	// the admin kubeconfig it wrote.
	admin, err := clientcmd.BuildConfigFromFlags("", c.srv.Kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "c.backup")
	epochBefore := c.srv.Server().Epoch()
	asked := time.Now()
	info, err := backupfile.Save(ctx, admin, file)
	answered := time.Now()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("backup of c under writes: revision %d, %d keys, %d bytes, taken in %s", info.Revision, info.Keys, info.Size, answered.Sub(asked))
	if info.Epoch != epochBefore {
		t.Errorf("backup names epoch %q, c serves %q", info.Epoch, epochBefore)
	}
	// The writers keep writing after it.
	waitForWrites(acked.count() + 40)
	stopWriting()
	writers.Wait()
	before, after := acked.split(asked, answered)
	if len(before) < 40 || len(after) == 0 {
		t.Fatalf("%d writes acknowledged before the backup, %d sent after it; want at least 40 and 1", len(before), len(after))
	}
	// One more write after the backup, which the mirror has before c is
	// restored.
	if _, err := exports.Create(ctx, apiExport("later", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	namesAt := func(r *region, opts metav1.ListOptions) ([]string, error) {
		list, err := dyn(t, r.srv, "s-c", "root").Resource(apiExports).List(ctx, opts)
		if err != nil {
			return nil, err
		}
		names := make([]string, 0, len(list.Items))
		for _, u := range list.Items {
			names = append(names, u.GetName())
		}
		return names, nil
	}
	cachetest.Eventually(t, "a reads s-c's later write", func(context.Context) error {
		names, err := namesAt(a, metav1.ListOptions{})
		if err != nil {
			return err
		}
		if !slices.Contains(names, "later") {
			return errors.New("later not there yet")
		}
		return nil
	})

	// c stopped, restored from the backup, started again.
	c.stop(t)
	if err := backupfile.Restore(ctx, backupfile.RestoreConfig{Snapshot: file, Directory: filepath.Join(c.opts.RootDirectory, options.DefaultEmbeddedEtcdDirectory), Force: true}); err != nil {
		t.Fatal(err)
	}
	c.start(t, ctx)

	// A new epoch: the restore changed it, not the epoch record (the
	// revision moved on, so the record's rule sees nothing go back).
	if epoch := c.srv.Server().Epoch(); epoch == epochBefore {
		t.Fatalf("c restored from a backup kept its epoch %s", epoch)
	}
	got, err := namesAt(c, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var missing, back []string
	for _, n := range before {
		if !slices.Contains(got, n) {
			missing = append(missing, n)
		}
	}
	for _, n := range append(after, "later") {
		if slices.Contains(got, n) {
			back = append(back, n)
		}
	}
	if len(missing) > 0 || len(back) > 0 {
		t.Fatalf("restored c: of %d writes acknowledged before the backup, %d missing %v; of %d sent after it, %d present %v",
			len(before), len(missing), missing, len(after)+1, len(back), back)
	}

	// The mirror holds the restored home's partition: consistent reads say
	// why they are refused, stale reads still have the later writes.
	cachetest.Eventually(t, "a refuses consistent reads of s-c with "+mirror.ReasonHomeRestored, func(context.Context) error {
		_, err := namesAt(a, metav1.ListOptions{})
		if !apierrors.IsServiceUnavailable(err) {
			return fmt.Errorf("got %v, want 503", err)
		}
		causes := err.(apierrors.APIStatus).Status().Details.Causes
		if len(causes) != 1 || string(causes[0].Type) != mirror.ReasonHomeRestored {
			return fmt.Errorf("causes %+v, want %s", causes, mirror.ReasonHomeRestored)
		}
		return nil
	})
	stale, err := namesAt(a, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range append(after, "later") {
		if !slices.Contains(stale, n) {
			t.Errorf("a's stale read of s-c after c's restore lacks %s, written after the backup", n)
		}
	}
}

// Only system:masters takes a backup: a shard, a reader and a peer get 403
// naming the rule. A server whose etcd is not its own answers a Status
// that says to back up that etcd with etcdctl, not a 500.
func TestBackupIsMastersOnlyAndRefusedOnAnExternalEtcd(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	// The fixture hands the server its etcd as an external one
	// (--etcd-servers).
	srv := cachetest.StartServer(t)
	for name, cfg := range map[string]*rest.Config{
		"shard":  srv.ShardConfig(t, "amber"),
		"reader": srv.UserConfig(t, "dashboard", kcpcache.ReadersGroup),
		"peer":   srv.UserConfig(t, kcpcache.PeerUser("west")),
	} {
		file := filepath.Join(t.TempDir(), "backup")
		_, err := backupfile.Save(ctx, cfg, file)
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), string(authorization.RuleBackupMastersOnly)) {
			t.Errorf("backup as a %s: %v; want 403 naming rule %s", name, err, authorization.RuleBackupMastersOnly)
		}
		if _, err := os.Stat(file); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("backup as a %s wrote %s (stat: %v)", name, file, err)
		}
	}
	admin := srv.Config()
	_, err := backupfile.Save(ctx, admin, filepath.Join(t.TempDir(), "backup"))
	status, ok := err.(apierrors.APIStatus)
	if !ok || status.Status().Code != http.StatusNotImplemented || status.Status().Reason != backup.ReasonExternalEtcd ||
		!strings.Contains(status.Status().Message, "etcdctl snapshot save") {
		t.Fatalf("backup from a server on an external etcd: %v; want 501 %s naming etcdctl snapshot save", err, backup.ReasonExternalEtcd)
	}
}
