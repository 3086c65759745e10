package backupfile

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"os"

	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"
)

// Info describes a backup file.
type Info struct {
	// Revision is the etcd revision of the snapshot: it holds every write
	// up to it and none after.
	Revision int64
	// Keys counts the live etcd keys in it: the cache's objects and its
	// own bookkeeping (the epoch marker, the home claims, ...).
	Keys int
	// Size is the file's size in bytes, the hash at its end included.
	Size int64
	// Epoch is the cache's epoch when the backup was taken; Save sets it,
	// Verify cannot know it.
	Epoch string
}

// Verify checks that path is a whole etcd snapshot, as Save and `etcdctl
// snapshot save` write one: a bbolt database followed by the SHA-256 of its
// bytes. The hash must match (a stream cut short or a file damaged since
// fails here), and the database must pass bbolt's consistency check, which
// etcdutl's snapshot status runs too. It reads the whole file twice.
func Verify(path string) (Info, error) {
	f, err := os.Open(path)
	if err != nil {
		return Info{}, err
	}
	defer func() { _ = f.Close() }()
	st, err := f.Stat()
	if err != nil {
		return Info{}, err
	}
	info := Info{Size: st.Size()}
	// etcd pads the database to whole pages and appends the hash, so a
	// snapshot with its hash is 32 bytes past a multiple of 512 (etcdutl's
	// own test of whether a file has one).
	if info.Size%512 != sha256.Size {
		return info, fmt.Errorf("%s (%d bytes) does not end in an etcd snapshot's SHA-256: cut short, or not a snapshot", path, info.Size)
	}
	h := sha256.New()
	if _, err := io.CopyN(h, f, info.Size-sha256.Size); err != nil {
		return info, fmt.Errorf("reading %s: %w", path, err)
	}
	want := make([]byte, sha256.Size)
	if _, err := io.ReadFull(f, want); err != nil {
		return info, fmt.Errorf("reading %s: %w", path, err)
	}
	if got := h.Sum(nil); !bytes.Equal(got, want) {
		return info, fmt.Errorf("%s is damaged: the SHA-256 of its database is %x, its end says %x", path, got, want)
	}
	status, err := snapshot.NewV3(zap.NewNop()).Status(path)
	if err != nil {
		return info, fmt.Errorf("%s: the database fails its consistency check: %w", path, err)
	}
	info.Revision, info.Keys = status.Revision, status.TotalKey
	return info, nil
}
