package embeddedetcd

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"
	"k8s.io/klog/v2"

	"github.com/kcp-cache/kcp-cache/cache/server/ports"
)

// Server is a running embedded etcd member.
type Server struct {
	etcd      *embed.Etcd
	clientURL string
	// memoryDir is the directory of an in-memory member, removed by Close.
	memoryDir string
	// stopMaintenance ends the maintenance loop; maintenanceDone is closed
	// when it has returned.
	stopMaintenance context.CancelFunc
	maintenanceDone chan struct{}
	// majority follows the member of a group; nil otherwise.
	majority  *Majority
	closeOnce sync.Once
}

// Start launches the member and returns once it serves client requests, or
// with an error if it fails or does not become ready within the timeout.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	logger := klog.FromContext(ctx).WithName("embedded-etcd")
	ctx = klog.NewContext(ctx, logger)
	if cfg.Group != nil {
		if !cfg.InMemory {
			return nil, fmt.Errorf("%w: a group is of in-memory members only", errGroupMisconfigured)
		}
		if err := cfg.Group.validate(); err != nil {
			return nil, err
		}
	}
	var memoryDir string
	if cfg.InMemory {
		dir, err := memoryDirectory(cfg.Directory)
		if err != nil {
			return nil, err
		}
		memoryDir, cfg.Directory, cfg.UnsafeNoFsync = dir, dir, true
	}
	removeMemoryDir := func() {
		if memoryDir != "" {
			_ = os.RemoveAll(memoryDir)
		}
	}
	if cfg.Directory == "" {
		return nil, fmt.Errorf("embedded etcd needs a data directory")
	}
	if err := privateDirectory(cfg.Directory); err != nil {
		return nil, err
	}
	cfg, err := cfg.WithPorts()
	if err != nil {
		removeMemoryDir()
		return nil, err
	}
	ec, clientURL, err := cfg.etcdConfig()
	if err != nil {
		removeMemoryDir()
		return nil, err
	}
	if err := setWALSegmentSize(cfg.WALSegmentSizeBytes); err != nil {
		removeMemoryDir()
		return nil, err
	}
	deadline := time.Now().Add(orDefault(cfg.StartTimeout, defaultStartTimeout))
	var e *embed.Etcd
	if cfg.Group != nil {
		// An attempt to join that failed leaves a started member's files.
		reset := func() error {
			if err := os.RemoveAll(cfg.Directory); err != nil {
				return err
			}
			return privateDirectory(cfg.Directory)
		}
		e, err = cfg.Group.launch(ctx, ec, deadline, reset)
	} else {
		e, err = launch(ctx, ec, deadline)
	}
	if err != nil {
		removeMemoryDir()
		return nil, err
	}
	s := &Server{etcd: e, clientURL: clientURL, memoryDir: memoryDir}
	if cfg.Group != nil && cfg.Majority != nil {
		s.majority = cfg.Majority
		s.majority.follow(e.Server)
	}
	logger.Info("Embedded etcd is ready", "clientURL", s.clientURL, "directory", cfg.Directory, "inMemory", cfg.InMemory, "clusterID", e.Server.Cluster().ID().String())
	s.startMaintenance(klog.NewContext(context.WithoutCancel(ctx), logger), cfg)
	return s, nil
}

// privateDirectory creates dir if needed, readable by its owner only, as
// etcd insists.
func privateDirectory(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("creating embedded etcd directory: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return fmt.Errorf("securing embedded etcd directory: %w", err)
	}
	return nil
}

// etcdConfig is etcd's configuration of the member, and the URL this
// server's clients reach it at.
//
// A member alone serves its client URL with gRPC only, and etcd's HTTP
// endpoints (/health, /version, /metrics) on a loopback port of their own
// that the kernel picks: where one TLS listener serves both, etcd hands
// gRPC to grpc.Server.ServeHTTP under net/http's HTTP/2 server
// (grpcHandlerFunc in go.etcd.io/etcd/server/v3/embed/serve.go), a path
// grpc-go calls slower than its own transport; with the HTTP endpoints
// split off (ListenClientHttpUrls) the client URL gets grpc.Server.Serve.
// This server's only client of the URL is its own API server (the URL is
// loopback-only, its certificates made at every start); operators read
// etcd's /metrics and /health on --embedded-etcd-listen-metrics-urls. At
// 50,000 objects: a load through the API 46.7 s to 39.3 s, a mirror's
// first copy 22.6 s to 19.7 s (docs/performance.md). A member of a group
// keeps both on its client URLs, which its group's servers reach.
func (cfg Config) etcdConfig() (*embed.Config, string, error) {
	ec := embed.NewConfig()
	ec.Name = cfg.Name
	if ec.Name == "" {
		ec.Name = DefaultName
	}
	ec.Dir = cfg.Directory
	clientURL := cfg.loopbackURL(cfg.ClientPort)
	peerURL := cfg.loopbackURL(cfg.PeerPort)
	ec.ListenClientUrls = []url.URL{clientURL}
	ec.AdvertiseClientUrls = []url.URL{clientURL}
	if cfg.Group == nil {
		ec.ListenClientHttpUrls = []url.URL{cfg.loopbackURL(0)}
		// Nothing reads or writes through etcd's HTTP gateway: this
		// server's clients speak gRPC.
		ec.EnableGRPCGateway = false
	}
	ec.ListenPeerUrls = []url.URL{peerURL}
	ec.AdvertisePeerUrls = []url.URL{peerURL}
	ec.InitialCluster = cfg.InitialCluster
	if ec.InitialCluster == "" {
		ec.InitialCluster = ec.Name + "=" + peerURL.String()
	}
	if cfg.InitialCluster == "" && cfg.Group == nil {
		// A member alone elects itself once its randomized election
		// timeout passes after etcd fast-forwards all but one tick of it:
		// 0.1–1 s of every start at etcd's defaults (100 ms ticks, 1 s
		// timeout), with nothing to wait for. It has no peers to send
		// heartbeats to or to lose its leadership to, so shorter ticks
		// cost a timer and nothing else; etcd's request timeout (5 s plus
		// twice the election timeout) becomes 5.2 s instead of 7 s.
		ec.TickMs, ec.ElectionMs = singleMemberTickMs, singleMemberElectionMs
	}
	if cfg.TLS != nil {
		ec.ClientTLSInfo = cfg.TLS.serverInfo()
		ec.PeerTLSInfo = cfg.TLS.serverInfo()
	}
	if cfg.Group != nil {
		// The group's peers speak TLS with the group's certificates (cfg.TLS
		// is then the member's group identity, which serves the loopback
		// client URL too), or plain HTTP.
		ec.PeerTLSInfo = transport.TLSInfo{}
		if cfg.Group.TLS != nil {
			ec.PeerTLSInfo = cfg.Group.TLS.serverInfo()
			ec.ClientTLSInfo = cfg.Group.TLS.serverInfo()
		}
		if err := cfg.Group.configure(ec); err != nil {
			return nil, "", err
		}
	}
	ec.WatchProgressNotifyInterval = orDefault(cfg.ProgressNotifyInterval, DefaultProgressNotifyInterval)
	ec.QuotaBackendBytes = cfg.QuotaBackendBytes
	if ec.QuotaBackendBytes == 0 {
		ec.QuotaBackendBytes = DefaultQuotaBackendBytes
	}
	ec.UnsafeNoFsync = cfg.UnsafeNoFsync
	ec.ForceNewCluster = cfg.ForceNewCluster
	for _, raw := range cfg.ListenMetricsURLs {
		u, err := url.Parse(raw)
		if err != nil {
			return nil, "", fmt.Errorf("embedded etcd metrics URL %q: %w", raw, err)
		}
		ec.ListenMetricsUrls = append(ec.ListenMetricsUrls, *u)
	}
	// etcd keeps every raft entry since its last snapshot in memory, plus
	// a tail for followers to catch up from: 15,000 entries by default, a
	// copy of each of the last 15,000 writes (about 1.3 KB each for a kcp
	// object). A single member has no followers, so it snapshots more often
	// and keeps a short tail; the entries are in the WAL on disk regardless.
	// A member of a group that falls further behind gets a snapshot.
	ec.SnapshotCount = snapshotCount
	ec.SnapshotCatchUpEntries = snapshotCatchUpEntries
	// etcd logs through zap; keep it to warnings so that the cache's own
	// structured log stays readable.
	ec.LogLevel = "warn"
	// embed.NewConfig leaves the slow-request threshold at zero (etcd's
	// command sets its 300 ms default from its flags), which makes every
	// request "slow": one warning line per request. Keep etcd's default.
	ec.WarningUnaryRequestDuration = embed.DefaultWarningUnaryRequestDuration
	return ec, clientURL.String(), nil
}

// launch starts etcd with ec and waits until it serves, fails, or deadline
// passes; on failure nothing of it keeps running.
func launch(ctx context.Context, ec *embed.Config, deadline time.Time) (*embed.Etcd, error) {
	e, err := embed.StartEtcd(ec)
	if err != nil {
		return nil, fmt.Errorf("starting embedded etcd: %w", err)
	}
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	select {
	case <-e.Server.ReadyNotify():
		return e, nil
	case err = <-e.Err():
		err = fmt.Errorf("embedded etcd failed while starting: %w", err)
	case <-timer.C:
		err = fmt.Errorf("embedded etcd not ready by the start timeout")
	case <-ctx.Done():
		err = ctx.Err()
	}
	// Close waits for etcd's client servers, which start only once the
	// member is ready or its server is stopping: a member that never became
	// ready (a group without a majority) would block Close forever. Stop the
	// server first so that they give up.
	e.Server.HardStop()
	e.Close()
	return nil, err
}

// ClientURL is the URL clients reach the member at.
func (s *Server) ClientURL() string { return s.clientURL }

// Err reports a fatal error of the running member: one of its listeners
// stopped serving.
func (s *Server) Err() <-chan error { return s.etcd.Err() }

// Stopped is closed once the member has stopped: after Close or Kill, or
// on its own (a fatal error, its removal from its group). Its owner knows
// whether it closed the member itself.
func (s *Server) Stopped() <-chan struct{} { return s.etcd.Server.StopNotify() }

// ClusterID is the identity of the member's cluster; an in-memory member
// has a new one at every start, unless it rejoined its running group.
func (s *Server) ClusterID() string { return s.etcd.Server.Cluster().ID().String() }

// Close stops the member gracefully: maintenance ends, in-flight requests
// finish, then the listeners and the data files close; an in-memory
// member's data is gone afterwards. Stop the apiserver first, so that it
// does not retry against a member that is going away. Close is safe to call
// more than once.
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		if s.stopMaintenance != nil {
			s.stopMaintenance()
			<-s.maintenanceDone
		}
		if s.majority != nil {
			s.majority.unfollow()
		}
		s.etcd.Close()
		if s.memoryDir != "" {
			_ = os.RemoveAll(s.memoryDir)
		}
	})
}

// Kill stops the member at once, as a crash would: without handing its
// leadership over or finishing requests, so that the rest of its cluster
// must notice and elect a new leader. Then it releases what Close releases.
// For tests of failures; a server closes its member with Close.
func (s *Server) Kill() {
	s.etcd.Server.HardStop()
	s.Close()
}

// memoryDirectory makes a fresh private directory on a memory file system:
// /dev/shm on Linux, the temporary directory elsewhere. For a member
// configured with a directory, the name is derived from it (and the user),
// so that a start after a crash removes what the crashed member left in
// memory; without one, the name is random.
func memoryDirectory(configured string) (string, error) {
	if configured == "" {
		dir, err := os.MkdirTemp(memoryBase(), "kcp-cache-etcd-")
		if err != nil {
			return "", fmt.Errorf("creating the in-memory etcd's directory: %w", err)
		}
		return dir, nil
	}
	dir, err := RemoveMemoryData(configured)
	if err != nil {
		return "", err
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return "", fmt.Errorf("creating the in-memory etcd's directory: %w", err)
	}
	return dir, nil
}

// RemoveMemoryData removes what an in-memory member configured with
// directory left on the memory file system when it did not stop cleanly (a
// crash, SIGKILL), as the member's next start does, and returns the
// directory it runs in. Only a directory of this user is removed, so that
// nobody else's directory or link in a shared /dev/shm is ever touched.
func RemoveMemoryData(directory string) (string, error) {
	abs, err := filepath.Abs(directory)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256([]byte(abs))
	dir := filepath.Join(memoryBase(), fmt.Sprintf("kcp-cache-etcd-%d-%x", os.Getuid(), sum[:8]))
	info, err := os.Lstat(dir)
	if err != nil {
		return dir, nil
	}
	if !info.IsDir() || !ownedByUs(info) {
		return "", fmt.Errorf("%s exists and is not a directory of this user; remove it", dir)
	}
	if err := os.RemoveAll(dir); err != nil {
		return "", fmt.Errorf("removing the data a previous in-memory etcd left: %w", err)
	}
	return dir, nil
}

// memoryBase is where in-memory members keep their data: /dev/shm on
// Linux, the temporary directory elsewhere.
func memoryBase() string {
	if info, err := os.Stat("/dev/shm"); err == nil && info.IsDir() {
		return "/dev/shm"
	}
	return os.TempDir()
}

// WithPorts returns cfg with zero ports replaced by free loopback ports, so
// that a caller can learn the client URL before the member starts.
func (cfg Config) WithPorts() (Config, error) {
	var err error
	if cfg.ClientPort, err = portOrFree(cfg.ClientPort); err != nil {
		return cfg, err
	}
	if cfg.PeerPort, err = portOrFree(cfg.PeerPort); err != nil {
		return cfg, err
	}
	return cfg, nil
}

// ClientURL is the URL the member will serve clients at; ports must be set.
func (cfg Config) ClientURL() string {
	u := cfg.loopbackURL(cfg.ClientPort)
	return u.String()
}

// PeerURL is the URL the member will talk to its peers at; ports must be set.
func (cfg Config) PeerURL() string {
	u := cfg.loopbackURL(cfg.PeerPort)
	return u.String()
}

func (cfg Config) loopbackURL(port int) url.URL {
	scheme := "http"
	if cfg.TLS != nil {
		scheme = "https"
	}
	return url.URL{Scheme: scheme, Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}
}

// portOrFree returns port, or a reserved free loopback port when port is 0.
// etcd needs the peer URL before it listens (it is part of the cluster
// membership), so the kernel's ":0" cannot be used directly; a reserved port
// is not handed to anyone else who reserves (see package ports).
func portOrFree(port int) (int, error) {
	if port != 0 {
		return port, nil
	}
	return ports.Reserve()
}

// snapshotCount and snapshotCatchUpEntries bound the in-memory raft log of
// the single-member embedded etcd to about 3,000 entries.
const (
	snapshotCount          = 2500
	snapshotCatchUpEntries = 500
)

// singleMemberTickMs and singleMemberElectionMs are the raft timings of a
// member alone in its cluster: it elects itself within 10–100 ms of its
// start.
const (
	singleMemberTickMs     = 10
	singleMemberElectionMs = 100
)

func orDefault(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}
