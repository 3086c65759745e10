package cachetest

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/klog/v2"

	"github.com/kcp-cache/kcp-cache/cache/options"
	"github.com/kcp-cache/kcp-cache/cache/server/embeddedetcd"
)

// memberEnv tells a child process of a test binary which member of a memory
// group it runs (RunMemberIfAsked): a memberSpec in JSON.
const memberEnv = "KCP_CACHE_TEST_MEMORY_MEMBER"

// memberReady is the line a member process writes to its standard output
// once its server is ready.
const memberReady = "kcp-cache test member ready"

// memberSpec is one member of a memory group: the group and the member's
// place in it, as its server's flags say.
type memberSpec struct {
	Peers      []string `json:"peers"`
	Name       string   `json:"name"`
	ClientURL  string   `json:"clientURL"`
	SecretFile string   `json:"secretFile"`
	// EtcdDirectory is --embedded-etcd-directory, which names the member's
	// directory on the memory file system; empty: under the root
	// directory.
	EtcdDirectory string `json:"etcdDirectory,omitempty"`
}

// option makes a server the member.
func (m memberSpec) option() Option {
	return OwnEmbeddedEtcd(func(o *options.Options) {
		o.EmbeddedEtcd.Storage = options.StorageMemory
		if m.EtcdDirectory != "" {
			o.EmbeddedEtcd.Directory = m.EtcdDirectory
		}
		g := o.EmbeddedEtcd.MemoryGroup
		g.Peers, g.MemberName, g.ClientURL, g.SecretFile = m.Peers, m.Name, m.ClientURL, m.SecretFile
	})
}

// RunMemberIfAsked runs, in a child process of a test binary started by
// StartMemoryGroupWithProcesses, the member it was started for, until the
// parent closes the child's standard input (or dies), and exits; in any
// other process it returns at once. A test binary whose tests start member
// processes calls it first thing in TestMain.
func RunMemberIfAsked() {
	encoded, ok := os.LookupEnv(memberEnv)
	if !ok {
		return
	}
	if err := runMember(encoded); err != nil {
		fmt.Fprintf(os.Stderr, "member process: %v\n", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func runMember(encoded string) error {
	var m memberSpec
	if err := json.Unmarshal([]byte(encoded), &m); err != nil {
		return fmt.Errorf("%s: %w", memberEnv, err)
	}
	var o Options
	m.option()(&o)
	ctx, cancel := context.WithTimeout(klog.NewContext(context.Background(), klog.Background()), DefaultTimeout)
	srv, err := Start(ctx, o)
	cancel()
	if err != nil {
		return fmt.Errorf("starting member %s: %w", m.Name, err)
	}
	fmt.Println(memberReady)
	_, _ = io.Copy(io.Discard, os.Stdin)
	return srv.Stop()
}

// MemberProcess is a member of a memory group in a child process of the
// test binary, so that a test can end it as a crash does (Kill): no
// leadership hand-over, no goodbye to its peers, nothing stopped cleanly.
type MemberProcess struct {
	// Name is the member's name in the group.
	Name string

	spec  memberSpec
	cmd   *exec.Cmd
	stdin io.WriteCloser
	logs  string
	// readyCh is closed when the member said it is ready.
	readyCh chan struct{}
	exited  chan struct{}
	err     error // the process's exit, once exited is closed
}

// startMemberProcess starts the test binary as member m; its output goes to
// a file in dir. It does not wait for the member to be ready (ready).
func startMemberProcess(m memberSpec, dir string) (*MemberProcess, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	encoded, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	p := &MemberProcess{Name: m.Name, spec: m, logs: filepath.Join(dir, m.Name+".log"),
		readyCh: make(chan struct{}), exited: make(chan struct{})}
	logs, err := os.Create(p.logs)
	if err != nil {
		return nil, err
	}
	defer func() { _ = logs.Close() }()
	// -test.run=^$: a binary whose TestMain does not call RunMemberIfAsked
	// runs no test and exits, which ready reports.
	p.cmd = exec.Command(self, "-test.run=^$")
	p.cmd.Env = append(os.Environ(), memberEnv+"="+string(encoded))
	p.cmd.Stderr = logs
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if sc.Text() == memberReady {
				close(p.readyCh)
				break
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// ready waits until the member's server is ready, or fails with its
// output's end when it exits first or ctx ends.
func (p *MemberProcess) ready(ctx context.Context) error {
	select {
	case <-p.readyCh:
		return nil
	case <-p.exited:
		return fmt.Errorf("member process %s exited before it was ready (%v); does TestMain call cachetest.RunMemberIfAsked? Its output ends:\n%s", p.Name, p.err, p.tail())
	case <-ctx.Done():
		return fmt.Errorf("member process %s not ready: %w; its output ends:\n%s", p.Name, ctx.Err(), p.tail())
	}
}

// Kill ends the member at once with SIGKILL, as a crash would, and waits
// until the process is gone. What it held in memory stays, as after a
// crash, until the test ends. Killing it again does nothing.
func (p *MemberProcess) Kill() error {
	select {
	case <-p.exited:
		return nil
	default:
	}
	if err := p.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	<-p.exited
	return nil
}

// stop ends the member cleanly (its standard input closed), or kills it
// when it does not stop within DefaultTimeout, and removes what it left in
// memory.
func (p *MemberProcess) stop() error {
	_ = p.stdin.Close()
	var err error
	select {
	case <-p.exited:
		var exit *exec.ExitError
		if p.err != nil && !(errors.As(p.err, &exit) && !exit.Exited()) {
			err = fmt.Errorf("member process %s: %w", p.Name, p.err)
		}
	case <-time.After(DefaultTimeout):
		err = fmt.Errorf("member process %s did not stop within %s", p.Name, DefaultTimeout)
		_ = p.Kill()
	}
	if p.spec.EtcdDirectory != "" {
		if _, rerr := embeddedetcd.RemoveMemoryData(p.spec.EtcdDirectory); rerr != nil {
			err = errors.Join(err, rerr)
		}
	}
	return err
}

// tail is the end of the member's output.
func (p *MemberProcess) tail() string {
	const limit = 8 << 10
	b, err := os.ReadFile(p.logs)
	if err != nil {
		return err.Error()
	}
	if len(b) > limit {
		b = b[len(b)-limit:]
	}
	return strings.TrimSpace(string(b))
}

// startMemberProcesses starts members as processes, waits until each is
// ready, and stops them when the test ends.
func startMemberProcesses(t testing.TB, members []memberSpec) ([]*MemberProcess, func(context.Context) error) {
	t.Helper()
	dir := t.TempDir()
	procs := make([]*MemberProcess, len(members))
	for i, m := range members {
		m.EtcdDirectory = filepath.Join(dir, m.Name+"-etcd")
		p, err := startMemberProcess(m, dir)
		if err != nil {
			t.Fatalf("starting member process %s: %v", m.Name, err)
		}
		procs[i] = p
		t.Cleanup(func() {
			if err := p.stop(); err != nil {
				t.Errorf("%v; its output ends:\n%s", err, p.tail())
			} else if t.Failed() {
				t.Logf("member process %s's output ends:\n%s", p.Name, p.tail())
			}
		})
	}
	return procs, func(ctx context.Context) error {
		var errs []error
		for _, p := range procs {
			errs = append(errs, p.ready(ctx))
		}
		return errors.Join(errs...)
	}
}
