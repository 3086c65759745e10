package options

import (
	"fmt"
	"net/url"
	"path/filepath"
	"time"

	"github.com/spf13/pflag"
)

const (
	// StorageEtcd keeps data in etcd on disk: the embedded member's
	// directory, or the external cluster of --etcd-servers.
	StorageEtcd = "etcd"
	// StorageMemory keeps data in an embedded member without disk: a
	// restarted server starts empty, as a new epoch, and shards refill it;
	// a server of a group (MemoryGroupOptions) refills from the others.
	StorageMemory = "memory"

	// DefaultEmbeddedEtcdMaintenanceInterval is how often the embedded etcd
	// measures its file and defragments it when it is mostly free.
	DefaultEmbeddedEtcdMaintenanceInterval = time.Minute

	// DefaultEmbeddedEtcdStartTimeout is how long a start waits for the
	// embedded etcd (a group's majority) to serve.
	DefaultEmbeddedEtcdStartTimeout = time.Minute

	// DefaultEmbeddedEtcdMinFreeDiskBytes is the free space under the
	// embedded etcd's directory below which the server takes no more
	// writes of partition objects. An etcd that meets a full disk does not
	// refuse the write: it ends the process at its next commit (measured:
	// docs/testing.md, "A full disk: what must hold"). 256 MiB leaves room
	// for a WAL segment etcd preallocates (64 MB), a snapshot, and the
	// system writes of a start (the CRDs, the epoch), so that a server
	// restarted on a nearly full disk still starts.
	DefaultEmbeddedEtcdMinFreeDiskBytes = 256 << 20
)

// EmbeddedEtcdOptions configure the etcd member that runs inside the cache
// server when no --etcd-servers are given.
type EmbeddedEtcdOptions struct {
	// Enabled is derived by Complete: true when no external etcd is configured.
	Enabled bool

	// Storage is StorageEtcd or StorageMemory.
	Storage string

	Directory  string
	ClientPort int
	PeerPort   int

	// MaintenanceInterval is how often the member reports its database
	// size and defragments a file that is mostly free space.
	MaintenanceInterval time.Duration

	// The settings below are kcp's embedded etcd flags (kcp-dev/embeddedetcd
	// options), passed to etcd as kcp passes them.

	// QuotaBackendBytes caps etcd's database; 0 keeps the default
	// (embeddedetcd.DefaultQuotaBackendBytes).
	QuotaBackendBytes int64
	// WALSegmentSizeBytes is the size of each write-ahead log file; 0 keeps
	// etcd's 64 MB. It is a process-wide setting of etcd.
	WALSegmentSizeBytes int64
	// ListenMetricsURLs are extra plain listeners for etcd's /metrics and
	// /health, for scraping the member directly.
	ListenMetricsURLs []string
	// ForceNewCluster starts the member as a new one-member cluster from
	// its existing data (etcd's --force-new-cluster), e.g. after its data
	// directory was restored from another installation.
	ForceNewCluster bool

	// StartTimeout bounds how long the server waits for its member to
	// serve (for a member of a group: for a majority of the group).
	StartTimeout time.Duration

	// MinFreeDiskBytes is the free space under Directory below which
	// creates, updates and patches of partition objects are refused with
	// 507 (on-disk storage only; 0: never).
	MinFreeDiskBytes int64

	// MemoryGroup makes several in-memory servers one group.
	MemoryGroup *MemoryGroupOptions
}

// NewEmbeddedEtcdOptions returns kcp-compatible defaults.
func NewEmbeddedEtcdOptions() *EmbeddedEtcdOptions {
	return &EmbeddedEtcdOptions{Storage: StorageEtcd, ClientPort: 2379, PeerPort: 2380, MaintenanceInterval: DefaultEmbeddedEtcdMaintenanceInterval, StartTimeout: DefaultEmbeddedEtcdStartTimeout, MinFreeDiskBytes: DefaultEmbeddedEtcdMinFreeDiskBytes, MemoryGroup: NewMemoryGroupOptions()}
}

// AddFlags adds the embedded etcd's flags to fs.
func (o *EmbeddedEtcdOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Directory, "embedded-etcd-directory", o.Directory,
		"Directory of the embedded etcd's data (and its TLS files when there is no root directory). Relative to --root-directory (or to the working directory without one) unless absolute; defaults to <root-directory>/etcd-server. Used only when --etcd-servers is empty.")
	fs.StringVar(&o.Storage, "storage", o.Storage,
		"Where data lives: \"etcd\" (the embedded etcd's directory, or --etcd-servers) or \"memory\" (an embedded etcd without disk: a restarted server starts empty and the shards refill it). Several memory servers hold the same data only as one group (--memory-peers); a restarted server of a group refills from the others.")
	fs.DurationVar(&o.MaintenanceInterval, "embedded-etcd-maintenance-interval", o.MaintenanceInterval,
		"How often the embedded etcd reports its database size (kcp_cache_embedded_etcd_db_size_bytes) and defragments its file when more than half of it is free space.")
	fs.IntVar(&o.ClientPort, "embedded-etcd-client-port", o.ClientPort, "Loopback port the embedded etcd serves clients on; 0 picks a free port.")
	fs.IntVar(&o.PeerPort, "embedded-etcd-peer-port", o.PeerPort, "Loopback port the embedded etcd uses for peer traffic; 0 picks a free port.")
	fs.Int64Var(&o.QuotaBackendBytes, "embedded-etcd-quota-backend-bytes", o.QuotaBackendBytes,
		"Size at which the embedded etcd's database raises its no-space alarm and refuses writes that add data (answered 507 InsufficientStorage; reads and deletes go on); 0 keeps 2 GiB.")
	fs.Int64Var(&o.WALSegmentSizeBytes, "embedded-etcd-wal-size-bytes", o.WALSegmentSizeBytes,
		"Size of each of the embedded etcd's write-ahead log files (preallocated); 0 keeps etcd's 64 MB.")
	fs.StringSliceVar(&o.ListenMetricsURLs, "embedded-etcd-listen-metrics-urls", o.ListenMetricsURLs,
		"URLs (http://host:port) where the embedded etcd also serves its /metrics and /health, without TLS.")
	fs.BoolVar(&o.ForceNewCluster, "embedded-etcd-force-new-cluster", o.ForceNewCluster,
		"Start the embedded etcd as a new one-member cluster from the data in its directory (etcd's --force-new-cluster), e.g. data restored from another installation.")
	fs.Int64Var(&o.MinFreeDiskBytes, "embedded-etcd-min-free-disk-bytes", o.MinFreeDiskBytes,
		"Free space under the embedded etcd's directory below which creates, updates and patches of partition objects are refused with 507 InsufficientStorage (nothing is written); reads, deletes and the server's own writes go on. An etcd whose disk fills up ends the process instead of refusing the write. Only with --storage=etcd; 0 turns the guard off.")
	fs.DurationVar(&o.StartTimeout, "embedded-etcd-start-timeout", o.StartTimeout,
		"How long the server waits for the embedded etcd to serve before it exits with an error; for a member of a memory group, for a majority of the group to be up (the error names the members it cannot reach).")
	o.MemoryGroup.AddFlags(fs)
}

// DefaultEmbeddedEtcdDirectory is the embedded etcd's directory, relative
// to the root directory, when --embedded-etcd-directory is not given.
const DefaultEmbeddedEtcdDirectory = "etcd-server"

// EmbeddedEtcdDirectory resolves --embedded-etcd-directory (dir) as the
// server does: DefaultEmbeddedEtcdDirectory when empty, relative to root
// (or to the working directory without one) unless absolute. The restore
// command resolves it the same way, so that it writes where the server
// reads.
func EmbeddedEtcdDirectory(root, dir string) (string, error) {
	if dir == "" {
		dir = DefaultEmbeddedEtcdDirectory
	}
	if filepath.IsAbs(dir) {
		return dir, nil
	}
	abs, err := filepath.Abs(filepath.Join(root, dir))
	if err != nil {
		return "", fmt.Errorf("resolving --embedded-etcd-directory: %w", err)
	}
	return abs, nil
}

// ValidateStorage checks --storage against whether an external etcd is
// configured; it applies whether or not the member runs.
func (o *EmbeddedEtcdOptions) ValidateStorage(external bool) []error {
	errs := o.MemoryGroup.Validate(o.Storage)
	switch o.Storage {
	case StorageEtcd:
	case StorageMemory:
		if external {
			errs = append(errs, fmt.Errorf("--storage=memory runs an embedded etcd without disk; it contradicts --etcd-servers"))
		}
		if o.ForceNewCluster && o.MemoryGroup.Enabled() {
			errs = append(errs, fmt.Errorf("--embedded-etcd-force-new-cluster contradicts --memory-peers: a group member holds no data of its own to start from"))
		}
	default:
		errs = append(errs, fmt.Errorf("--storage must be %q or %q, got %q", StorageEtcd, StorageMemory, o.Storage))
	}
	return errs
}

// Validate checks the member's settings.
func (o *EmbeddedEtcdOptions) Validate() []error {
	var errs []error
	if o.MaintenanceInterval <= 0 {
		errs = append(errs, fmt.Errorf("--embedded-etcd-maintenance-interval must be positive, got %s", o.MaintenanceInterval))
	}
	if o.StartTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--embedded-etcd-start-timeout must be positive, got %s", o.StartTimeout))
	}
	for name, port := range map[string]int{"--embedded-etcd-client-port": o.ClientPort, "--embedded-etcd-peer-port": o.PeerPort} {
		if port < 0 || port > 65535 {
			errs = append(errs, fmt.Errorf("%s must be between 0 and 65535, got %d", name, port))
		}
	}
	if o.ClientPort != 0 && o.ClientPort == o.PeerPort {
		errs = append(errs, fmt.Errorf("--embedded-etcd-client-port and --embedded-etcd-peer-port must differ"))
	}
	for name, size := range map[string]int64{"--embedded-etcd-quota-backend-bytes": o.QuotaBackendBytes, "--embedded-etcd-wal-size-bytes": o.WALSegmentSizeBytes, "--embedded-etcd-min-free-disk-bytes": o.MinFreeDiskBytes} {
		if size < 0 {
			errs = append(errs, fmt.Errorf("%s must not be negative, got %d", name, size))
		}
	}
	for _, raw := range o.ListenMetricsURLs {
		if u, err := url.Parse(raw); err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
			errs = append(errs, fmt.Errorf("--embedded-etcd-listen-metrics-urls: %q is not an http(s)://host:port URL", raw))
		}
	}
	return errs
}
