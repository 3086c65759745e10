// Package ports reserves free loopback ports for servers that must be told
// their port before they listen: etcd's peer URL is part of its cluster
// membership, and a restarted server keeps its address.
//
// The kernel's ":0" says which port is free now, not which stays free: a
// port found and closed can be handed to the next caller, in this process
// or another, before the server binds it. Reserve therefore
//
//   - hands out each port at most once per process, and
//   - takes a lock file per port, shared by every process on the machine
//     that uses this package (parallel test binaries of `go test ./...`),
//     and skips ports another process reserved less than reservationTTL ago.
//
// This is the model of controller-runtime's envtest (internal/testing/addr).
package ports

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"
)

// reservationTTL is how long another process's reservation is respected: long
// enough for a server to bind the port, short enough that stale lock files of
// crashed processes do not exhaust the range.
const reservationTTL = 2 * time.Minute

// attempts bounds the search; collisions are rare, so this only guards
// against a broken environment.
const attempts = 100

var (
	mu       sync.Mutex
	reserved = map[int]bool{}
)

// Reserve returns a loopback port that is free and that no other caller of
// Reserve, in this process or (for reservationTTL) in another, gets too.
func Reserve() (int, error) {
	mu.Lock()
	defer mu.Unlock()
	dir := filepath.Join(os.TempDir(), "kcp-cache-ports")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return 0, fmt.Errorf("creating the port reservation directory: %w", err)
	}
	for range attempts {
		port, err := kernelFreePort()
		if err != nil {
			return 0, err
		}
		if reserved[port] || !lock(filepath.Join(dir, strconv.Itoa(port))) {
			continue
		}
		reserved[port] = true
		return port, nil
	}
	return 0, fmt.Errorf("no free loopback port after %d attempts", attempts)
}

func kernelFreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// lock creates path exclusively; a file older than reservationTTL is stale
// and replaced. It reports whether this process now holds the reservation.
func lock(path string) bool {
	if info, err := os.Stat(path); err == nil {
		if time.Since(info.ModTime()) < reservationTTL {
			return false
		}
		// Stale: remove it, then race for it like a new one; only one
		// process's O_EXCL create succeeds (two processes that both saw
		// the same stale file within microseconds could both win; the
		// window is far smaller than the kernel's reuse race it replaces).
		_ = os.Remove(path)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		// os.ErrExist: another process reserved it first.
		return false
	}
	_, _ = fmt.Fprintf(f, "%d\n", os.Getpid())
	_ = f.Close()
	return true
}
