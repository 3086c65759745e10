package cachetest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/klog/v2"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/options"
	"github.com/kcp-cache/kcp-cache/cache/server"
	"github.com/kcp-cache/kcp-cache/cache/server/embeddedetcd"
	"github.com/kcp-cache/kcp-cache/cache/server/pki"
	"github.com/kcp-cache/kcp-cache/cache/server/ports"
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
	// PeerListenURL is --memory-peer-listen-url: where the member listens
	// when its peer URL is a proxy's (GroupLinks); empty: on its peer URL.
	PeerListenURL string `json:"peerListenURL,omitempty"`
	// RootDirectory and Port, when set, keep the server's admin
	// kubeconfig and address across restarts, for a parent that reads the
	// member (MemberProcess.Config).
	RootDirectory string `json:"rootDirectory,omitempty"`
	Port          int    `json:"port,omitempty"`
	// ClientCAFile, when set, is the CA the member trusts for client
	// certificates, whose key the parent holds (MemberProcess.ShardConfig).
	ClientCAFile string `json:"clientCAFile,omitempty"`
	// Args are more of the server's flags, as on its command line.
	Args []string `json:"args,omitempty"`
	// DataDirectory, for a server that is no member of a group (no
	// Peers), is its etcd's data directory (Options.EtcdDirectory).
	DataDirectory string `json:"dataDirectory,omitempty"`
	// OwnEtcdDirectory, for a server that is no member of a group, makes
	// it run its own embedded etcd on disk there
	// (--embedded-etcd-directory), as a production server does: what the
	// server does about that etcd's disk (the disk guard) and what the
	// etcd does to the process (it ends it on a full disk) are then the
	// server's. DataDirectory is not used then.
	OwnEtcdDirectory string `json:"ownEtcdDirectory,omitempty"`
}

// option makes a server the member, or, without Peers, a standalone
// server on an etcd of its own in DataDirectory; Args apply last.
func (m memberSpec) option() Option {
	member := OwnEmbeddedEtcd(func(o *options.Options) {
		o.EmbeddedEtcd.Storage = options.StorageMemory
		if m.EtcdDirectory != "" {
			o.EmbeddedEtcd.Directory = m.EtcdDirectory
		}
		g := o.EmbeddedEtcd.MemoryGroup
		g.Peers, g.MemberName, g.ClientURL, g.SecretFile = m.Peers, m.Name, m.ClientURL, m.SecretFile
		g.PeerListenURL = m.PeerListenURL
	})
	return func(o *Options) {
		switch {
		case len(m.Peers) > 0:
			member(o)
		case m.OwnEtcdDirectory != "":
			OwnEmbeddedEtcd(func(o *options.Options) {
				o.EmbeddedEtcd.Storage = options.StorageEtcd
				o.EmbeddedEtcd.Directory = m.OwnEtcdDirectory
			})(o)
		default:
			o.EtcdDirectory = m.DataDirectory
		}
		base := o.Flags
		o.Flags = func(opts *options.Options) {
			if base != nil {
				base(opts)
			}
			if err := parseArgs(opts, m.Args); err != nil {
				// A flag the server does not know is the test's
				// mistake: the process ends, and ready reports its
				// output.
				panic(err)
			}
		}
		o.RootDirectory, o.Port, o.ClientCAFile = m.RootDirectory, m.Port, m.ClientCAFile
	}
}

// parseArgs sets opts from a server's command-line flags.
func parseArgs(opts *options.Options, args []string) error {
	if len(args) == 0 {
		return nil
	}
	var fss cliflag.NamedFlagSets
	opts.AddFlags(&fss)
	fs := pflag.NewFlagSet("member", pflag.ContinueOnError)
	for _, f := range fss.FlagSets {
		fs.AddFlagSet(f)
	}
	return fs.Parse(args)
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

	spec memberSpec
	dir  string
	// clientCA issues identities the member trusts (spec.ClientCAFile).
	clientCA *pki.CA
	// The fields below are the running process's; start sets them anew.
	cmd   *exec.Cmd
	stdin io.WriteCloser
	logs  string
	// readyCh is closed when the member said it is ready.
	readyCh chan struct{}
	exited  chan struct{}
	err     error // the process's exit, once exited is closed
	// paused: stopped with SIGSTOP and not continued yet.
	paused bool
}

// startMemberProcess starts the test binary as member m; its output goes to
// a file in dir. It does not wait for the member to be ready (ready).
func startMemberProcess(m memberSpec, dir string) (*MemberProcess, error) {
	p := &MemberProcess{Name: m.Name, spec: m, dir: dir}
	if err := p.start(); err != nil {
		return nil, err
	}
	return p, nil
}

// start starts the member's process, the first time or again after stop;
// its output is appended to the member's log file.
func (p *MemberProcess) start() error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	encoded, err := json.Marshal(p.spec)
	if err != nil {
		return err
	}
	p.logs = filepath.Join(p.dir, p.Name+".log")
	p.readyCh, p.exited, p.err, p.paused = make(chan struct{}), make(chan struct{}), nil, false
	logs, err := os.OpenFile(p.logs, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer func() { _ = logs.Close() }()
	// -test.run=^$: a binary whose TestMain does not call RunMemberIfAsked
	// runs no test and exits, which ready reports.
	p.cmd = exec.Command(self, "-test.run=^$")
	p.cmd.Env = append(os.Environ(), memberEnv+"="+string(encoded))
	p.cmd.Stderr = logs
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		return err
	}
	if err := p.cmd.Start(); err != nil {
		return err
	}
	// This run's own channels: a later start replaces p's.
	readyCh, exited, cmd := p.readyCh, p.exited, p.cmd
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if sc.Text() == memberReady {
				close(readyCh)
				break
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
		p.err = cmd.Wait()
		close(exited)
	}()
	return nil
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

// Pause stops the member's process with SIGSTOP, as a long GC pause or a
// frozen VM would: it keeps every connection open and answers nothing
// until Continue. The process's threads stop within the call, as the
// kernel delivers SIGSTOP before anything else the process would do.
func (p *MemberProcess) Pause() error {
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return fmt.Errorf("pausing member process %s: %w", p.Name, err)
	}
	p.paused = true
	return nil
}

// State is the member process's state as the kernel reports it (the third
// field of /proc/PID/stat: R running, S sleeping, T stopped, ...), or why it
// cannot be read: for a test to tell whether a pause is in force.
func (p *MemberProcess) State() string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
	if err != nil {
		return err.Error()
	}
	// The command name (the second field) is in parentheses and may hold
	// spaces; the state follows the last closing one.
	if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) {
		return string(b[i+2])
	}
	return "unknown"
}

// Continue lets a paused member run again (SIGCONT).
func (p *MemberProcess) Continue() error {
	if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		return fmt.Errorf("continuing member process %s: %w", p.Name, err)
	}
	p.paused = false
	return nil
}

// Exited is closed when the member's process has ended: stopped, killed,
// or on its own (a fatal error). A start replaces it.
func (p *MemberProcess) Exited() <-chan struct{} { return p.exited }

// ExitError is how the process ended, once Exited is closed (nil: exit
// status 0).
func (p *MemberProcess) ExitError() error {
	select {
	case <-p.exited:
		return p.err
	default:
		return nil
	}
}

// LogFile is where the member's output goes, across its starts.
func (p *MemberProcess) LogFile() string { return p.logs }

// StartAgain starts a member whose process has ended on its own (Exited)
// as the same member, on its data, address and root directory, and waits
// until it is ready.
func (p *MemberProcess) StartAgain(ctx context.Context) error {
	select {
	case <-p.exited:
	default:
		return fmt.Errorf("member process %s is still running", p.Name)
	}
	if err := p.start(); err != nil {
		return err
	}
	return p.ready(ctx)
}

// RestartWith is Restart with the server's flags args instead of those it
// ran with.
func (p *MemberProcess) RestartWith(ctx context.Context, args []string) error {
	p.spec.Args = args
	return p.Restart(ctx)
}

// Restart stops the member cleanly, its memory gone, and starts it again as
// the same member, on the same address and root directory: it rejoins the
// group and refills from the others. It waits until the member is ready.
func (p *MemberProcess) Restart(ctx context.Context) error {
	if err := p.stop(); err != nil {
		return err
	}
	if err := p.start(); err != nil {
		return err
	}
	return p.ready(ctx)
}

// Config is an admin configuration for the member's cache server, from the
// kubeconfig it wrote into its root directory; it stays valid across
// restarts. Only a member started with a root directory and a port has one
// (StartMemoryGroupWith).
func (p *MemberProcess) Config() (*rest.Config, error) {
	if p.spec.RootDirectory == "" {
		return nil, fmt.Errorf("member process %s has no root directory of its own", p.Name)
	}
	return clientcmd.BuildConfigFromFlags("", filepath.Join(p.spec.RootDirectory, server.KubeconfigFileName))
}

// ShardConfig is a configuration for the member's cache that
// authenticates as shard's identity, system:kcp:shard:<shard>, with a
// client certificate of the CA the parent gave the member
// (StartMemoryGroupWith).
func (p *MemberProcess) ShardConfig(t testing.TB, shard string) *rest.Config {
	t.Helper()
	cfg, err := p.Config()
	if err != nil {
		t.Fatal(err)
	}
	if p.clientCA == nil {
		t.Fatalf("member process %s trusts no CA of this process", p.Name)
	}
	certPEM, keyPEM, err := p.clientCA.IssueClient(kcpcache.ShardUser(shard), nil)
	if err != nil {
		t.Fatal(err)
	}
	c := rest.AnonymousClientConfig(cfg)
	c.CertData, c.KeyData = certPEM, keyPEM
	return c
}

// stop ends the member cleanly (its standard input closed), or kills it
// when it does not stop within DefaultTimeout, and removes what it left in
// memory.
func (p *MemberProcess) stop() error {
	if p.paused {
		// A stopped process never reads the end of its input.
		_ = p.Continue()
	}
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

// StartServerProcess starts a standalone cache server, on an etcd of its
// own, in a child process of the test binary (whose TestMain calls
// RunMemberIfAsked), with the server's flags args, and waits until it is
// ready; the test can pause it and restart it on its data, and it stops
// when the test ends. Its name is for its log. It trusts client
// certificates of a CA of this process (ShardConfig).
func StartServerProcess(t testing.TB, name string, args []string) *MemberProcess {
	t.Helper()
	return StartServerProcessWith(t, ServerProcessOptions{Name: name, Args: args})
}

// ServerProcessOptions say what StartServerProcessWith starts.
type ServerProcessOptions struct {
	// Name is the process's name, for its log.
	Name string
	// Args are the server's flags, as on its command line.
	Args []string
	// EmbeddedEtcdDirectory, when set, makes the server run its own
	// embedded etcd on disk in this directory (--storage=etcd,
	// --embedded-etcd-directory), as a production server does; empty: an
	// etcd beside the server in the child process, in a directory of the
	// test's.
	EmbeddedEtcdDirectory string
}

// StartServerProcessWith is StartServerProcess as o says.
func StartServerProcessWith(t testing.TB, o ServerProcessOptions) *MemberProcess {
	t.Helper()
	name, args := o.Name, o.Args
	clientCA, err := pki.NewCA("cachetest-process-clients")
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(t.TempDir(), "client-ca.crt")
	if err := pki.WriteFile(caFile, clientCA.CertPEM); err != nil {
		t.Fatal(err)
	}
	port, err := ports.Reserve()
	if err != nil {
		t.Fatal(err)
	}
	spec := memberSpec{Name: name, RootDirectory: t.TempDir(), DataDirectory: t.TempDir(), OwnEtcdDirectory: o.EmbeddedEtcdDirectory, Port: port, ClientCAFile: caFile, Args: args}
	procs, ready := startMemberProcesses(t, []memberSpec{spec})
	procs[0].clientCA = clientCA
	ctx, cancel := context.WithTimeout(context.Background(), DefaultTimeout)
	defer cancel()
	if err := ready(ctx); err != nil {
		t.Fatal(err)
	}
	return procs[0]
}
