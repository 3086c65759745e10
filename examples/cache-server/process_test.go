//go:build unix

package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
)

// These tests run the real binary, as kcp's tooling and kcp-operator's
// image do: it is built once per test binary into a directory anyone may
// read, since one of the tests runs it as another user.

var built struct {
	once sync.Once
	dir  string
	path string
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if built.dir != "" {
		_ = os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

// binaryEnv names a binary to test instead of building one: the static
// binary the Dockerfile builds, for instance. Another user must be able to
// run it (see TestKcpOperatorDeployment).
const binaryEnv = "KCP_CACHE_SERVER_BINARY"

// cacheServerBinary builds this package's binary, once, unless binaryEnv
// names one.
func cacheServerBinary(t *testing.T) string {
	t.Helper()
	if path := os.Getenv(binaryEnv); path != "" {
		return path
	}
	built.once.Do(func() {
		if built.dir, built.err = os.MkdirTemp("", "kcp-cache-binary-"); built.err != nil {
			return
		}
		if built.err = os.Chmod(built.dir, 0o755); built.err != nil {
			return
		}
		built.path = filepath.Join(built.dir, "cache-server")
		cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", built.path, ".")
		if out, err := cmd.CombinedOutput(); err != nil {
			built.err = fmt.Errorf("go build: %w\n%s", err, out)
		}
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.path
}

// serverProcess is the binary running until the test ends.
type serverProcess struct {
	cmd    *exec.Cmd
	output *syncBuffer
	// exited is closed when the process has ended; err is its result.
	exited chan struct{}
	err    error

	stopOnce sync.Once
	stopErr  error
}

// startBinary starts the binary with args in dir; configure may set the
// environment or the user it runs as. The process is stopped (SIGTERM,
// then SIGKILL after cachetest.DefaultTimeout) when the test ends, and its
// output is logged if the test failed.
func startBinary(t *testing.T, dir string, args []string, configure func(*exec.Cmd)) *serverProcess {
	t.Helper()
	p := &serverProcess{output: &syncBuffer{}, exited: make(chan struct{})}
	p.cmd = exec.Command(cacheServerBinary(t), args...)
	p.cmd.Dir = dir
	p.cmd.Stdout, p.cmd.Stderr = p.output, p.output
	if configure != nil {
		configure(p.cmd)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(p.exited)
		p.err = p.cmd.Wait()
	}()
	t.Cleanup(func() {
		if err := p.stop(); err != nil {
			t.Errorf("cache-server did not stop cleanly: %v", err)
		}
		if t.Failed() {
			t.Logf("cache-server %s output:\n%s", strings.Join(args, " "), p.output.String())
		}
	})
	return p
}

// stop ends the process as a container runtime does, and returns its exit
// error; a clean shutdown on SIGTERM is nil. Later calls return the same.
func (p *serverProcess) stop() error {
	p.stopOnce.Do(func() { p.stopErr = p.signalAndWait() })
	return p.stopErr
}

func (p *serverProcess) signalAndWait() error {
	select {
	case <-p.exited:
		return fmt.Errorf("exited before it was stopped: %v", p.err)
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		return p.err
	case <-time.After(cachetest.DefaultTimeout):
		_ = p.cmd.Process.Kill()
		<-p.exited
		return fmt.Errorf("still running %s after SIGTERM; killed", cachetest.DefaultTimeout)
	}
}

// untilExit returns a context that ends when the process exits, so that a
// wait for the server does not outlive a server that failed to start.
func (p *serverProcess) untilExit(t *testing.T) context.Context {
	ctx, cancel := context.WithCancelCause(context.Background())
	t.Cleanup(func() { cancel(nil) })
	go func() {
		select {
		case <-p.exited:
			cancel(fmt.Errorf("cache-server exited: %v", p.err))
		case <-ctx.Done():
		}
	}()
	return ctx
}

// syncBuffer collects the output of a process and is read by the test.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// tree lists every path below dir (relative, "/"-separated) with its size
// for regular files, so that two listings differ when anything was
// created, removed or written.
func tree(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		entry := filepath.ToSlash(rel)
		if d.Type().IsRegular() {
			info, err := d.Info()
			if err != nil {
				return err
			}
			entry += fmt.Sprintf(" (%d bytes)", info.Size())
		}
		out = append(out, entry)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

// ownedBy lists the entries of the world-writable directories (the only
// places another user could write on this machine) that uid owns.
func ownedBy(t *testing.T, uid int) []string {
	t.Helper()
	var out []string
	seen := map[string]bool{}
	for _, dir := range []string{os.TempDir(), "/tmp", "/var/tmp", "/dev/shm"} {
		if seen[dir] {
			continue
		}
		seen[dir] = true
		entries, err := os.ReadDir(dir)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			info, err := e.Info()
			if err != nil {
				continue // removed meanwhile by someone else
			}
			if st, ok := info.Sys().(*syscall.Stat_t); ok && int(st.Uid) == uid {
				out = append(out, filepath.Join(dir, e.Name()))
			}
		}
	}
	sort.Strings(out)
	return out
}
