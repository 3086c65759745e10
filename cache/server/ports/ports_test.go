package ports

import (
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// Parallel callers never get the same port, even when the kernel would
// hand a just-closed port out again.
func TestReserveNeverHandsOutAPortTwice(t *testing.T) {
	const n = 40
	got := make(chan int, n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			p, err := Reserve()
			if err != nil {
				t.Error(err)
				return
			}
			got <- p
		})
	}
	wg.Wait()
	close(got)
	seen := map[int]bool{}
	for p := range got {
		if seen[p] {
			t.Errorf("port %d handed out twice", p)
		}
		seen[p] = true
	}
}

// Another process's fresh reservation is respected, a stale one is not.
func TestLockRespectsFreshReservationsOnly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "12345")
	if !lock(path) {
		t.Fatal("the first lock of a free port failed")
	}
	if lock(path) {
		t.Fatal("a fresh reservation was taken again")
	}
	old := time.Now().Add(-2 * reservationTTL)
	if err := os.Chtimes(path, old, old); err != nil {
		t.Fatal(err)
	}
	if !lock(path) {
		t.Fatal("a stale reservation was not replaced")
	}
}
