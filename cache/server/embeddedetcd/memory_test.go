package embeddedetcd

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// An in-memory member is a new cluster at every start, and leaves nothing
// behind when it closes.
func TestInMemoryMemberIsNewAtEveryStart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := func() (string, string) {
		t.Helper()
		srv, err := Start(ctx, Config{InMemory: true})
		if err != nil {
			t.Fatal(err)
		}
		dir := srv.memoryDir
		if _, err := os.Stat(dir); err != nil {
			t.Fatalf("the member's directory: %v", err)
		}
		id := srv.ClusterID()
		srv.Close()
		srv.Close() // safe twice
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("%s is still there after Close (stat: %v)", dir, err)
		}
		return id, dir
	}
	firstID, firstDir := start()
	secondID, secondDir := start()
	if firstID == secondID || firstDir == secondDir {
		t.Errorf("two starts share cluster %s / %s, directory %s / %s", firstID, secondID, firstDir, secondDir)
	}
}

func TestWorthDefragmenting(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		size, inUse int64
		want        bool
	}{
		{100 * mib, 10 * mib, true},
		{100 * mib, 60 * mib, false}, // mostly data
		{40 * mib, 1 * mib, true},
		{20 * mib, 1 * mib, false}, // free, but too little to matter
		{0, 0, false},
	} {
		if got := worthDefragmenting(tc.size, tc.inUse, 32*mib); got != tc.want {
			t.Errorf("size %d MiB, in use %d MiB: %v, want %v", tc.size/mib, tc.inUse/mib, got, tc.want)
		}
	}
}

// What a crashed in-memory member left in memory is removed when a member
// with the same configured directory starts again, and by RemoveMemoryData.
func TestInMemoryMemberFreesWhatACrashLeft(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	configured := filepath.Join(t.TempDir(), "etcd")
	srv, err := Start(ctx, Config{InMemory: true, Directory: configured})
	if err != nil {
		t.Fatal(err)
	}
	dir := srv.memoryDir
	srv.Close()
	// A crash leaves the directory behind.
	if err := os.MkdirAll(filepath.Join(dir, "member"), 0o700); err != nil {
		t.Fatal(err)
	}
	leftover := filepath.Join(dir, "member", "leftover")
	if err := os.WriteFile(leftover, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	srv, err = Start(ctx, Config{InMemory: true, Directory: configured})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if srv.memoryDir != dir {
		t.Fatalf("memory directory %s, then %s: want the same for the same configuration", dir, srv.memoryDir)
	}
	if _, err := os.Stat(leftover); !os.IsNotExist(err) {
		t.Errorf("the crashed member's data is still there (stat: %v)", err)
	}
	if _, err := os.Stat(configured); !os.IsNotExist(err) {
		t.Errorf("the configured directory was created on disk (stat: %v)", err)
	}

	// Another crash; RemoveMemoryData removes what it left without a start.
	srv.Close()
	if err := os.MkdirAll(filepath.Join(dir, "member"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(leftover, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := RemoveMemoryData(configured); err != nil || got != dir {
		t.Fatalf("RemoveMemoryData = %s, %v; want %s", got, err, dir)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the crashed member's data is still there after RemoveMemoryData (stat: %v)", err)
	}
}
