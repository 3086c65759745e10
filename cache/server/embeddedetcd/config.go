package embeddedetcd

import "time"

const (
	// DefaultProgressNotifyInterval keeps the watch cache's idea of "now" at
	// most this far behind etcd when nothing changes. Consistent reads request
	// progress on demand, so this bounds only the idle case; upstream's default
	// of ten minutes would let an idle cache's bookmarks go stale.
	DefaultProgressNotifyInterval = 5 * time.Second

	// DefaultQuotaBackendBytes is etcd's own default (2 GiB), stated here so
	// that the trade-off is visible: the cache holds copies, not history.
	DefaultQuotaBackendBytes = 2 * 1024 * 1024 * 1024

	// DefaultMaintenanceInterval is how often the member measures its
	// database file and defragments it when most of it is free.
	DefaultMaintenanceInterval = time.Minute

	// DefaultDefragMinFreeBytes is the least free space in the file that is
	// worth a defragmentation: below it, the pause is not worth the bytes.
	DefaultDefragMinFreeBytes = 32 * 1024 * 1024

	defaultStartTimeout = 60 * time.Second

	// DefaultName is the member's name when Config.Name is empty: the name of
	// every standalone cache's member, which a restored data directory keeps.
	DefaultName = "kcp-cache"
)

// Config says where and how the embedded member runs.
type Config struct {
	// Directory holds etcd's data. It is created if missing (not with
	// InMemory).
	Directory string

	// InMemory keeps the data in memory only: the member runs in a fresh
	// directory on a memory file system (/dev/shm where there is one),
	// without fsync, and Close removes it. Every start without a Group is a
	// new cluster with a new identity and no data. Directory, if set, is
	// not created; it
	// names the memory directory, so that a start after a crash frees what
	// the crashed member held.
	InMemory bool

	// Name is the member's name; empty means "kcp-cache". InitialCluster
	// lists every member of a new cluster as name=peerURL,...; empty means
	// this member alone. Several members form a cluster for tests of a
	// scaled-out cache; a cache server runs one member.
	Name           string
	InitialCluster string

	// Group, with InMemory, makes the member one of several in-memory
	// members of one cache, each in its own server (see Group); Name,
	// InitialCluster and PeerPort are then the group's. Start joins the
	// running group, or starts it anew when none runs.
	Group *Group

	// Majority, with Group, is told about the running member, so that the
	// layers above can tell whether it is cut off from its group (see
	// Majority).
	Majority *Majority

	// ClientPort and PeerPort are loopback ports; 0 reserves a free one
	// that no other caller in this process (or, for a while, another
	// process on the machine) is given.
	ClientPort int
	PeerPort   int

	// ProgressNotifyInterval is how often etcd sends progress notifications on
	// idle watches. Zero means DefaultProgressNotifyInterval.
	ProgressNotifyInterval time.Duration

	// QuotaBackendBytes caps the database size. Zero means DefaultQuotaBackendBytes.
	QuotaBackendBytes int64

	// WALSegmentSizeBytes is the size of each write-ahead log file, which
	// etcd preallocates. Zero keeps etcd's size (64 MB, or what an earlier
	// member of this process set). etcd holds it in a package variable, so
	// it is one value per process: Start refuses a member that asks for a
	// different one than an earlier member did.
	WALSegmentSizeBytes int64

	// ListenMetricsURLs are extra listeners (http://host:port) on which
	// etcd serves /metrics and /health.
	ListenMetricsURLs []string

	// ForceNewCluster starts the member as a new one-member cluster from
	// the data in Directory, dropping the membership recorded there.
	ForceNewCluster bool

	// UnsafeNoFsync skips fsync: for tests only, where durability across a
	// power loss does not matter and fsync dominates latency.
	UnsafeNoFsync bool

	// TLS, when set, makes the member serve clients and peers over TLS and
	// accept only certificates of its CA (see GenerateTLS); without it the
	// member speaks plain HTTP to any local process.
	TLS *TLSFiles

	// MaintenanceInterval is how often the member reports its database size
	// (kcp_cache_embedded_etcd_db_size_bytes) and defragments the file when
	// it is mostly free space. Zero means DefaultMaintenanceInterval;
	// negative turns maintenance off.
	MaintenanceInterval time.Duration

	// DefragMinFreeBytes is the least free space worth a defragmentation.
	// Zero means DefaultDefragMinFreeBytes.
	DefragMinFreeBytes int64

	// StartTimeout bounds how long Start waits for the member to serve.
	// Zero means one minute.
	StartTimeout time.Duration
}
