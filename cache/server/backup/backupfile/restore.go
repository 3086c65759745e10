package backupfile

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"
	"k8s.io/klog/v2"

	"github.com/kcp-cache/kcp-cache/cache/server/embeddedetcd"
)

// RevisionBump is how far Restore moves etcd's revision past the
// snapshot's: further than any cache writes between a backup and its
// restore, so that every revision a client saw before the restore is below
// the restored member's (etcd's advice for members that Kubernetes API
// servers and their clients watch; etcdutl's --bump-revision). With the
// revisions in between marked compacted, a watch resumed from one of them
// answers 410 Gone and its client relists.
const RevisionBump = 1_000_000_000

// restorePeerURL is the peer URL the restored member is recorded with. A
// cache's member is alone in its cluster and never dials its peers, and
// the server starts it on its own ports whatever the record says.
const restorePeerURL = "https://127.0.0.1:2380"

// ErrDirectoryInUse is returned by Restore for a data directory a running
// etcd member holds: stop the server first.
var ErrDirectoryInUse = errors.New("the data directory is in use by a running etcd member (stop the cache server first)")

// RestoreConfig says what Restore restores where.
type RestoreConfig struct {
	// Snapshot is the backup file (Save's, or `etcdctl snapshot save`'s).
	Snapshot string
	// Directory is the embedded member's data directory
	// (--embedded-etcd-directory).
	Directory string
	// Force replaces a Directory that holds anything; without it Restore
	// refuses one.
	Force bool
}

// Restore makes cfg.Directory a data directory for the embedded member
// (embeddedetcd.DefaultName) holding cfg.Snapshot, with etcdutl's restore:
// the hash is checked, the membership is replaced by a new one-member
// cluster, and the revision is moved on by RevisionBump with everything
// below it compacted. The cluster token is random, so the new cluster's ID,
// and with it the cache's epoch, is one no member had before: the server
// started on the directory serves a new epoch, whatever its root directory
// recorded (see package epoch). The server must be stopped.
//
// The directory is built aside (next to cfg.Directory) and renamed into
// place only when complete; with Force, the directory it replaces is
// removed afterwards. A directory a running member holds is never touched
// (ErrDirectoryInUse).
func Restore(ctx context.Context, cfg RestoreConfig) error {
	logger := klog.FromContext(ctx)
	dir, err := filepath.Abs(cfg.Directory)
	if err != nil {
		return err
	}
	occupied, err := holdsAnything(dir)
	if err != nil {
		return err
	}
	if occupied {
		if err := checkNotInUse(dir); err != nil {
			return err
		}
		if !cfg.Force {
			return fmt.Errorf("%s is not empty: restoring replaces everything in it; to do so, pass --force", dir)
		}
	}
	parent := filepath.Dir(dir)
	if err := os.MkdirAll(parent, 0o700); err != nil {
		return err
	}
	building, err := os.MkdirTemp(parent, "."+filepath.Base(dir)+".restore-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(building) }()
	token, err := randomToken()
	if err != nil {
		return err
	}
	start := time.Now()
	if err := snapshot.NewV3(zap.NewNop()).Restore(snapshot.RestoreConfig{
		SnapshotPath:        cfg.Snapshot,
		Name:                embeddedetcd.DefaultName,
		OutputDataDir:       building,
		PeerURLs:            []string{restorePeerURL},
		InitialCluster:      embeddedetcd.DefaultName + "=" + restorePeerURL,
		InitialClusterToken: token,
		RevisionBump:        RevisionBump,
		MarkCompacted:       true,
	}); err != nil {
		return fmt.Errorf("restoring %s: %w", cfg.Snapshot, err)
	}
	if err := replaceDir(building, dir, occupied); err != nil {
		return err
	}
	logger.Info("Restored the embedded etcd's data directory from a backup", "snapshot", cfg.Snapshot, "directory", dir, "took", time.Since(start))
	return nil
}

// holdsAnything reports whether dir exists with any entry in it.
func holdsAnything(dir string) (bool, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return len(entries) > 0, nil
}

// checkNotInUse fails with ErrDirectoryInUse when a running member holds
// the database of dir: etcd's bbolt holds an exclusive lock on it for as
// long as it runs, and a read-only open asks for a shared one.
func checkNotInUse(dir string) error {
	db := filepath.Join(dir, "member", "snap", "db")
	if _, err := os.Stat(db); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	b, err := bolt.Open(db, 0o400, &bolt.Options{ReadOnly: true, Timeout: 500 * time.Millisecond})
	if errors.Is(err, bolterrors.ErrTimeout) {
		return fmt.Errorf("%s: %w", dir, ErrDirectoryInUse)
	}
	if err != nil {
		// Not a database a member could hold open: nothing runs on it.
		return nil
	}
	return b.Close()
}

// replaceDir renames built to dir, the directory it replaces (if existing)
// out of the way first and removed last.
func replaceDir(built, dir string, existing bool) error {
	parent := filepath.Dir(dir)
	if !existing {
		// An empty directory, or none.
		if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		if err := os.Rename(built, dir); err != nil {
			return err
		}
		return syncDir(parent)
	}
	suffix, err := randomHex()
	if err != nil {
		return err
	}
	old := filepath.Join(parent, "."+filepath.Base(dir)+".replaced-"+suffix)
	if err := os.Rename(dir, old); err != nil {
		return err
	}
	if err := os.Rename(built, dir); err != nil {
		if back := os.Rename(old, dir); back != nil {
			return fmt.Errorf("%w; the replaced data is in %s", err, old)
		}
		return err
	}
	if err := syncDir(parent); err != nil {
		return err
	}
	return os.RemoveAll(old)
}

// randomToken is a cluster token no member had before.
func randomToken() (string, error) {
	h, err := randomHex()
	return "kcp-cache-restore-" + h, err
}

func randomHex() (string, error) {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}
