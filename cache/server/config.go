package server

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsapiserver "k8s.io/apiextensions-apiserver/pkg/apiserver"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/client-go/rest"
	openapicommon "k8s.io/kube-openapi/pkg/common"
	"k8s.io/kube-openapi/pkg/validation/spec"

	"github.com/kcp-cache/kcp-cache/cache/options"
	"github.com/kcp-cache/kcp-cache/cache/server/dataplane"
	"github.com/kcp-cache/kcp-cache/cache/server/embeddedetcd"
	"github.com/kcp-cache/kcp-cache/cache/server/homes"
	"github.com/kcp-cache/kcp-cache/cache/server/removal"
)

// KubeconfigFileName is the admin kubeconfig a server writes into its root directory.
const KubeconfigFileName = "cache.kubeconfig"

// EmbeddedEtcdCertsDirName is the directory below the root directory that
// holds the embedded etcd's TLS files.
const EmbeddedEtcdCertsDirName = "etcd-certs"

// Config is a cache server's configuration, in three parts: the upstream
// apiextensions configuration, what a user of the library sets (Extra)
// between NewConfig and Complete, and what NewConfig derived from the
// options, which nobody changes afterwards.
type Config struct {
	Apiextensions *apiextensionsapiserver.Config
	Extra         ExtraConfig

	derived derivedConfig
}

// ExtraConfig is the cache-specific part of Config that a user sets.
type ExtraConfig struct {
	// BootstrapCRDs are created or updated in the system partition at start;
	// the server is not ready until they are Established and their watch
	// caches serve, and nobody may delete them. NewConfig sets the CRDs of
	// the types the options name and the heartbeat type (bootstrap.CRDs; by
	// default the whole kcp profile, bootstrap.DefaultCRDs).
	BootstrapCRDs []*apiextensionsv1.CustomResourceDefinition

	// Removal says when the data of shards and types that are gone is
	// removed; NewConfig takes it from the options.
	Removal removal.Config

	// SyntheticDelay holds every request back this long (kcp's
	// --synthetic-delay, for tests of slow caches); NewConfig takes it from
	// the options.
	SyntheticDelay time.Duration

	// Lists bound the LISTs of cached types served at once (the LIST
	// budget); NewConfig takes them from the options.
	Lists dataplane.ListLimits

	// MemoryLimit is what the server may hold in memory, in bytes (0: no
	// limit); NewConfig takes it from the options (--memory-limit). While
	// the live heap is above options.FullPercent of it, creates are
	// refused with 507.
	MemoryLimit int64

	// MinFreeDiskBytes is the free space under the embedded etcd's
	// directory below which creates, updates and patches of partition
	// objects are refused with 507 (0: never); NewConfig takes it from the
	// options (--embedded-etcd-min-free-disk-bytes) for an embedded etcd
	// on disk, and sets 0 otherwise: an in-memory member or an external
	// etcd has no directory of this server's to watch.
	MinFreeDiskBytes int64

	// Hierarchy names this cache and the peers it mirrors; NewConfig takes
	// it from the options. No name and no peers: a cache on its own.
	Hierarchy HierarchyConfig
}

// HierarchyConfig is a cache's place in a hierarchy of caches.
type HierarchyConfig struct {
	// CacheName is this cache's name (--cache-name); empty without peers.
	CacheName string
	// Peers are the caches whose home partitions this cache mirrors, each
	// with its one client (homes.NewPeer).
	Peers []*homes.Peer
	// FreshnessWait bounds a consistent read's wait for the mirror.
	FreshnessWait time.Duration
	// AdoptShards are shards whose home moves to this cache.
	AdoptShards []string
	// PassOn are, per peer, the only resources passed on to it
	// (--pass-on); a peer not named gets everything.
	PassOn map[string][]string
}

// derivedConfig is what NewConfig derives from the options: files it wrote
// or read under the root directory, and how the server is reached.
type derivedConfig struct {
	// embeddedEtcd, when set, is started by New before any storage is built.
	embeddedEtcd *embeddedetcd.Config
	// storage is where the cache's data is: endpoints, client TLS, prefix.
	// The API server's storage and the server's own etcd client (the epoch,
	// data removal) both use it.
	storage storagebackend.Config
	// epochFile is where the server records the epoch between starts
	// (empty: without a root directory, nowhere).
	epochFile string

	// adminToken authenticates the admin kubeconfig's user (system:masters).
	adminToken string
	// servingCAData lets clients verify the serving certificate, as it was
	// at start: the admin kubeconfig is written with it, and again only at
	// the next start.
	servingCAData []byte
	// kubeconfigPath is where the admin kubeconfig is written; empty skips it.
	kubeconfigPath string
	// profilerAddress is where New serves Go's profiler; empty serves none.
	profilerAddress string
	// alwaysAllowPaths are non-resource paths anyone may reach, on top of
	// the health paths and /version (--authorization-always-allow-paths).
	alwaysAllowPaths []string

	// reloads follow the files of credentials that upstream's serving does
	// not follow itself (the token file, the peers' kubeconfigs, a mounted
	// cache's client CA); New runs them from FileReloadHookName.
	reloads []func(context.Context)

	// hostLoopback is the host's loopback configuration when the cache is
	// mounted (see NewMountedConfig); nil for a standalone server.
	hostLoopback *rest.Config
	// hostShard and hostShardToken identify the host's own shard to a
	// mounted cache (see Host.Shard); the token lives only in memory.
	hostShard      string
	hostShardToken string
}

// shutdownWatchTerminationGracePeriod bounds how long shutdown waits for
// terminated watches to drain.
const shutdownWatchTerminationGracePeriod = 2 * time.Second

// CompletedConfig can only be made by Config.Complete.
type CompletedConfig struct {
	*completedConfig
}

// completedConfig is a snapshot of a Config that New builds servers from and
// never changes.
type completedConfig struct {
	// apiextensions is the upstream configuration. New completes a copy of
	// it, as upstream completes its own, with the server's handler chain:
	// the chain serves that server's data plane and epoch, which only New
	// makes.
	apiextensions *apiextensionsapiserver.Config
	extra         ExtraConfig
	derived       derivedConfig
	// bootstrapped names the bootstrapped CRDs, which nobody may delete and
	// data removal never removes.
	bootstrapped sets.Set[string]
}

// NewConfig turns completed options into the configuration of a standalone
// server. It creates (or reuses) the serving certificate and admin token
// under the root directory and opens the secure listener, but starts nothing.
//
// Without a root directory (--root-directory=, as kcp-operator runs kcp's
// cache on a read-only file system) it writes nothing but the embedded
// etcd's directory: the serving certificate is --tls-cert-file's or lives in
// memory, the admin token lives in memory and no kubeconfig is written
// (clients use --client-ca-file identities), the embedded etcd's TLS files
// go into its own directory (as kcp's embedded etcd keeps its own), and the
// epoch is not recorded between starts (see epoch.Keeper: a data directory
// copied back from an older backup is then not told apart; a new or
// restored etcd still is).
func NewConfig(opts options.CompletedOptions) (*Config, error) {
	return newConfig(opts, nil)
}

// NewMountedConfig configures a cache served by host under /services/cache/
// of the host's own listener (see Mount). The cache opens no port; its
// loopback client goes through the host's listener.
func NewMountedConfig(opts options.CompletedOptions, host Host) (*Config, error) {
	if host.LoopbackClientConfig == nil {
		return nil, fmt.Errorf("a mounted cache needs the host's loopback client configuration")
	}
	if len(opts.FeatureGates) > 0 {
		// Upstream's gates are the process's: setting them here would
		// change the host's own servers too.
		return nil, fmt.Errorf("a mounted cache runs with its host's feature gates; set them on the host, not with --feature-gates")
	}
	return newConfig(opts, &host)
}

// Complete returns the configuration New builds servers from: a snapshot
// of what the user set, with the defaults of what they left out. It changes
// nothing in c; upstream's own completion, which fills fields in place, runs
// in New on a copy.
func (c *Config) Complete() CompletedConfig {
	extra := c.Extra
	extra.BootstrapCRDs = slices.Clone(c.Extra.BootstrapCRDs)
	if extra.Removal.CheckInterval <= 0 {
		extra.Removal.CheckInterval = options.DefaultRemovalCheckInterval
	}
	bootstrapped := sets.New[string]()
	for _, crd := range extra.BootstrapCRDs {
		bootstrapped.Insert(crd.Name)
	}
	return CompletedConfig{&completedConfig{
		apiextensions: c.Apiextensions,
		extra:         extra,
		derived:       c.derived,
		bootstrapped:  bootstrapped,
	}}
}

// upstreamCRDSyncedHook is the post-start hook with which
// k8s.io/apiextensions-apiserver/pkg/apiserver's New waits for its CRD
// informer's first list. A server stopped before that list returns (etcd
// is down, or the host stops the cache while it starts) ends that hook with
// the context's error, and runPostStartHook (k8s.io/apiserver/pkg/server,
// hooks.go) ends the whole process on any hook error: kcp with the cache
// mounted, or a test binary. The upstream hook also closes a signal for
// upstream's not-found handler (503 rather than 404 until CRD paths are
// known), which this server does not install.
const upstreamCRDSyncedHook = "crd-informer-synced"

// upstream completes a copy of the apiextensions configuration, for New to
// give it the server's handler chain. apiextensions turns discovery off because
// kube-apiserver's aggregator serves /apis in front of it; here nothing is
// in front, and clients (kubectl) need /apis under every scoped prefix. The
// CRD discovery controller feeds the aggregated discovery manager this
// enables.
//
// The copy is deep where upstream's Complete writes through a pointer: it
// completes the OpenAPI configurations in place (their Info's version, the
// default security and the 401 common response), so a shallow copy would
// write into the Config the user holds and into every later server built
// from it. Everything else Complete sets is a field of the copied struct.
//
// Upstream's post-start hook upstreamCRDSyncedHook is turned off; the
// server's own CRDSourceHookName holds /readyz in its place.
func (c *completedConfig) upstream() apiextensionsapiserver.CompletedConfig {
	generic := *c.apiextensions.GenericConfig
	generic.OpenAPIConfig = copyOpenAPIConfig(generic.OpenAPIConfig)
	generic.OpenAPIV3Config = copyOpenAPIV3Config(generic.OpenAPIV3Config)
	// A copy: the set is shared with the Config the user holds.
	generic.DisabledPostStartHooks = sets.NewString(generic.DisabledPostStartHooks.UnsortedList()...).Insert(upstreamCRDSyncedHook)
	cfg := &apiextensionsapiserver.Config{GenericConfig: &generic, ExtraConfig: c.apiextensions.ExtraConfig}
	completed := cfg.Complete()
	completed.GenericConfig.EnableDiscovery = true
	return completed
}

// copyOpenAPIConfig copies what upstream's Complete writes into in place.
func copyOpenAPIConfig(c *openapicommon.Config) *openapicommon.Config {
	if c == nil {
		return nil
	}
	cp := *c
	cp.Info = copyInfo(c.Info)
	cp.CommonResponses = maps.Clone(c.CommonResponses)
	cp.DefaultSecurity = slices.Clone(c.DefaultSecurity)
	return &cp
}

// copyOpenAPIV3Config copies what upstream's Complete writes into in place.
func copyOpenAPIV3Config(c *openapicommon.OpenAPIV3Config) *openapicommon.OpenAPIV3Config {
	if c == nil {
		return nil
	}
	cp := *c
	cp.Info = copyInfo(c.Info)
	cp.CommonResponses = maps.Clone(c.CommonResponses)
	cp.DefaultSecurity = slices.Clone(c.DefaultSecurity)
	return &cp
}

func copyInfo(info *spec.Info) *spec.Info {
	if info == nil {
		return nil
	}
	cp := *info
	return &cp
}

// EtcdTransport is how the server reaches the etcd its data lives in,
// the embedded one's client certificate included: a cache mounted in this
// server may keep its data in the same etcd, under another prefix.
func (c *Config) EtcdTransport() storagebackend.TransportConfig {
	return c.derived.storage.Transport
}

// Host is what a server that mounts the cache lends it.
type Host struct {
	// LoopbackClientConfig reaches the host's own listener. The cache's
	// loopback client uses it with /services/cache appended and a token of
	// the cache's own.
	LoopbackClientConfig *rest.Config
	// Authenticator and Authorizer, when set, let the host's users use the
	// cache with the host's credentials and rules, next to the cache's own
	// admin and loopback tokens.
	Authenticator authenticator.Request
	Authorizer    authorizer.Authorizer
	// Shard, when set, is the host's own shard name: the cache mints a token
	// for its identity, system:kcp:shard:<Shard>, so that the host's
	// replication uses the cache as that shard (Server.HostShardConfig), not
	// as an admin.
	Shard string
}
