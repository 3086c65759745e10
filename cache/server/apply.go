package server

import (
	"crypto/rand"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"sync"

	apiextensionsapiserver "k8s.io/apiextensions-apiserver/pkg/apiserver"
	apiextensionsoptions "k8s.io/apiextensions-apiserver/pkg/cmd/server/options"
	generatedopenapi "k8s.io/apiextensions-apiserver/pkg/generated/openapi"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	authnunion "k8s.io/apiserver/pkg/authentication/request/union"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	authzpath "k8s.io/apiserver/pkg/authorization/path"
	authzunion "k8s.io/apiserver/pkg/authorization/union"
	openapinamer "k8s.io/apiserver/pkg/endpoints/openapi"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	"k8s.io/apiserver/pkg/util/compatibility"
	"k8s.io/apiserver/pkg/util/openapi"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	netutils "k8s.io/utils/net"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/options"
	"github.com/kcp-cache/kcp-cache/cache/server/authentication"
	"github.com/kcp-cache/kcp-cache/cache/server/authorization"
	"github.com/kcp-cache/kcp-cache/cache/server/bootstrap"
	"github.com/kcp-cache/kcp-cache/cache/server/dataplane"
	"github.com/kcp-cache/kcp-cache/cache/server/embeddedetcd"
	"github.com/kcp-cache/kcp-cache/cache/server/epoch"
	"github.com/kcp-cache/kcp-cache/cache/server/homes"
	"github.com/kcp-cache/kcp-cache/cache/server/partition"
	"github.com/kcp-cache/kcp-cache/cache/server/pki"
	"github.com/kcp-cache/kcp-cache/cache/server/reload"
	"github.com/kcp-cache/kcp-cache/cache/server/removal"
)

// The translators below each turn one group of options into the parts of
// the configuration that group decides, as sample-apiserver's option groups
// apply themselves (ApplyTo); newConfig, first, is the list of them. A new flag
// touches its options group and its group's translator.

// newConfig builds the configuration NewConfig and NewMountedConfig return
// (host nil: a standalone server) from the translators below.
func newConfig(opts options.CompletedOptions, host *Host) (*Config, error) {
	types, err := opts.Types()
	if err != nil {
		return nil, fmt.Errorf("--bootstrap-types: %w", err)
	}
	root := opts.RootDirectory
	if root != "" {
		if err := os.MkdirAll(root, 0o700); err != nil {
			return nil, fmt.Errorf("creating root directory: %w", err)
		}
	}
	derived := derivedConfig{alwaysAllowPaths: opts.Authorization.AlwaysAllowPaths}
	// Copies: what NewConfig derives (the embedded etcd's endpoint and
	// client certificate, a listener, a self-signed certificate) is the
	// configuration's, never written back into the caller's options.
	etcdOpts := *opts.Etcd
	serving := *opts.SecureServing.SecureServingOptions

	if err := applyEmbeddedEtcd(opts.EmbeddedEtcd, root, &etcdOpts, &derived); err != nil {
		return nil, err
	}
	if err := applyStorage(root, etcdOpts, &derived); err != nil {
		return nil, err
	}

	generic := newGenericConfig()
	if host == nil {
		if err := applyStandaloneServing(opts, &serving, generic, &derived); err != nil {
			return nil, err
		}
	} else if err := applyMountedServing(generic, &derived, opts.Authentication, *host); err != nil {
		return nil, err
	}
	var extraCfg ExtraConfig
	if err := applyLimits(opts.Limits, generic, &extraCfg); err != nil {
		return nil, err
	}
	applyDiskGuard(opts.EmbeddedEtcd, &extraCfg)
	if err := opts.Audit.ApplyTo(&generic.Config); err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}

	crdExtra, err := applyStorageGetters(etcdOpts, derived, generic)
	if err != nil {
		return nil, err
	}
	if extraCfg.Hierarchy, err = applyHierarchy(opts.Hierarchy, &derived); err != nil {
		return nil, err
	}
	applyRemoval(opts.Removal, &extraCfg)
	extraCfg.BootstrapCRDs = bootstrap.CRDs(types)
	extraCfg.SyntheticDelay = opts.SyntheticDelay
	return &Config{
		Apiextensions: &apiextensionsapiserver.Config{
			GenericConfig: generic,
			ExtraConfig:   crdExtra,
		},
		Extra:   extraCfg,
		derived: derived,
	}, nil
}

// newGenericConfig is upstream's recommended configuration with what every
// cache server sets regardless of its options.
func newGenericConfig() *genericapiserver.RecommendedConfig {
	generic := genericapiserver.NewRecommendedConfig(apiextensionsapiserver.Codecs)
	// End watches as soon as shutdown starts (upstream's
	// WithWatchTerminationDuringShutdown). Without it the HTTP server waits
	// the full request timeout for open watches, and clients keep streaming
	// from a server that is going away instead of reconnecting.
	generic.ShutdownWatchTerminationGracePeriod = shutdownWatchTerminationGracePeriod
	generic.LongRunningFunc = withLongRunningBackup(generic.LongRunningFunc)
	generic.EffectiveVersion = compatibility.DefaultBuildEffectiveVersion()
	generic.MergedResourceConfig = apiextensionsapiserver.DefaultAPIResourceConfigSource()
	// InstallAPIGroup needs OpenAPI v3 models (server-side apply builds on
	// them); kubectl's client-side validation still downloads v2.
	definitions := openapi.GetOpenAPIDefinitionsWithoutDisabledFeatures(generatedopenapi.GetOpenAPIDefinitions)
	namer := openapinamer.NewDefinitionNamer(apiextensionsapiserver.Scheme, scheme.Scheme)
	generic.OpenAPIV3Config = genericapiserver.DefaultOpenAPIV3Config(definitions, namer)
	generic.OpenAPIConfig = genericapiserver.DefaultOpenAPIConfig(definitions, namer)

	return generic
}

// applyEmbeddedEtcd configures the embedded member (when enabled) and points
// the storage at it: its loopback client URL, with a client certificate only
// this process holds.
func applyEmbeddedEtcd(o *options.EmbeddedEtcdOptions, root string, etcdOpts *genericoptions.EtcdOptions, derived *derivedConfig) error {
	if !o.Enabled {
		return nil
	}
	ec, err := embeddedetcd.Config{
		Directory:           o.Directory,
		InMemory:            o.Storage == options.StorageMemory,
		ClientPort:          o.ClientPort,
		PeerPort:            o.PeerPort,
		MaintenanceInterval: o.MaintenanceInterval,
		QuotaBackendBytes:   o.QuotaBackendBytes,
		WALSegmentSizeBytes: o.WALSegmentSizeBytes,
		ListenMetricsURLs:   o.ListenMetricsURLs,
		ForceNewCluster:     o.ForceNewCluster,
		StartTimeout:        o.StartTimeout,
	}.WithPorts()
	if err != nil {
		return err
	}
	if ec.Group, err = memoryGroup(o.MemoryGroup); err != nil {
		return err
	}
	if ec.Group != nil {
		ec.Majority = embeddedetcd.NewMajority(ec.Group.Names())
	}
	// Only this process may reach the member: TLS with client certificates,
	// regenerated at every start under the root directory, or in the
	// member's own directory without one.
	certsParent := root
	if certsParent == "" {
		certsParent = o.Directory
	}
	tlsFiles, err := embeddedEtcdTLS(filepath.Join(certsParent, EmbeddedEtcdCertsDirName), o.MemoryGroup, ec.Group)
	if err != nil {
		return fmt.Errorf("embedded etcd certificates: %w", err)
	}
	ec.TLS = &tlsFiles
	derived.embeddedEtcd = &ec
	transport := &etcdOpts.StorageConfig.Transport
	transport.ServerList = []string{ec.ClientURL()}
	transport.TrustedCAFile, transport.CertFile, transport.KeyFile = tlsFiles.CAFile, tlsFiles.ClientCertFile, tlsFiles.ClientKeyFile
	return nil
}

// applyStorage records where the data is, where the epoch is kept between
// starts, and the admin token (created once under the root directory, or
// in memory without one).
func applyStorage(root string, etcdOpts genericoptions.EtcdOptions, derived *derivedConfig) error {
	derived.storage = etcdOpts.StorageConfig
	tokenFile := ""
	if root != "" {
		derived.epochFile = filepath.Join(root, epoch.FileName)
		tokenFile = filepath.Join(root, authentication.AdminTokenFileName)
	}
	token, err := authentication.LoadOrCreateAdminToken(tokenFile)
	if err != nil {
		return err
	}
	derived.adminToken = token
	return nil
}

// applyLimits bounds the requests served at once (upstream's max-in-flight
// filter: API Priority and Fairness would need the flowcontrol API served,
// which this server does not serve), the LISTs (the LIST budget) and what
// the server takes in before its memory is full (--memory-limit).
func applyLimits(o *options.LimitOptions, generic *genericapiserver.RecommendedConfig, extra *ExtraConfig) error {
	generic.MaxRequestsInFlight = o.MaxRequestsInFlight
	generic.MaxMutatingRequestsInFlight = o.MaxMutatingRequestsInFlight
	generic.FlowControl = nil
	extra.Lists = dataplane.ListLimits{
		MaxObjectsInFlight: o.MaxListObjectsInFlight,
		WaitTimeout:        o.ListWaitTimeout,
		ReturnMemory:       o.ReturnMemoryAfterLists,
	}
	limit, _, err := o.ResolveMemoryLimit()
	extra.MemoryLimit = limit
	return err
}

// applyDiskGuard sets the free disk space below which writes are refused:
// only an embedded etcd on disk has a directory this server can watch.
func applyDiskGuard(o *options.EmbeddedEtcdOptions, extra *ExtraConfig) {
	if o.Enabled && o.Storage == options.StorageEtcd {
		extra.MinFreeDiskBytes = o.MinFreeDiskBytes
	}
}

// memoryFull is the live heap at which a server with memory limit limit
// refuses creates (0: never).
func memoryFull(limit int64) uint64 {
	return uint64(limit) / 100 * options.FullPercent
}

// applyRemoval says when the data of shards and types that are gone is
// removed.
func applyRemoval(o *options.RemovalOptions, extra *ExtraConfig) {
	extra.Removal = removal.Config{
		ShardRetention: o.ShardRetention,
		TypeRetention:  o.TypeRetention,
		CheckInterval:  o.CheckInterval,
	}
}

// applyStorageGetters makes every registry, the CRD API's and every custom
// resource's, store through the partitioned storage (partition.RESTOptionsGetter)
// on the storage the etcd options name, and returns apiextensions' extra
// configuration built on it.
func applyStorageGetters(etcdOpts genericoptions.EtcdOptions, derived derivedConfig, generic *genericapiserver.RecommendedConfig) (apiextensionsapiserver.ExtraConfig, error) {
	if err := etcdOpts.ApplyTo(&generic.Config); err != nil {
		return apiextensionsapiserver.ExtraConfig{}, err
	}
	// A member of an in-memory group keeps serving what it holds when cut
	// off from its majority (partition/majority.go).
	var majority partition.Majority
	if ec := derived.embeddedEtcd; ec != nil && ec.Majority != nil {
		majority = ec.Majority
	}
	generic.RESTOptionsGetter = partition.RESTOptionsGetter{Delegate: generic.RESTOptionsGetter, Majority: majority}
	// apiextensions' own getter for custom resources (JSON storage codec, no
	// per-resource cache sizes), wrapped like the generic one.
	crdOptionsGetter := apiextensionsoptions.NewCRDRESTOptionsGetter(etcdOpts, generic.ResourceTransformers, generic.StorageObjectCountTracker)
	extra, err := apiextensionsExtra(partition.RESTOptionsGetter{Delegate: crdOptionsGetter, Majority: majority}, generic)
	if err != nil {
		return apiextensionsapiserver.ExtraConfig{}, err
	}
	return extra, nil
}

// applyStandaloneServing opens the cache's own secure listener with a
// (self-signed by default) certificate and its own authentication.
func applyStandaloneServing(opts options.CompletedOptions, serving *genericoptions.SecureServingOptions, generic *genericapiserver.RecommendedConfig, derived *derivedConfig) error {
	if err := serving.MaybeDefaultWithSelfSignedCerts("localhost", nil, []net.IP{netutils.ParseIPSloppy("127.0.0.1")}); err != nil {
		return fmt.Errorf("creating self-signed serving certificate: %w", err)
	}
	caData, err := servingCAData(serving)
	if err != nil {
		return err
	}
	derived.servingCAData = caData
	if opts.RootDirectory != "" {
		derived.kubeconfigPath = filepath.Join(opts.RootDirectory, KubeconfigFileName)
	}
	// The profiler is the process's: a mounted cache leaves it to its host.
	derived.profilerAddress = opts.ProfilerAddress
	// Upstream's SecureServingOptions.ApplyTo serves a certificate from
	// files (--tls-cert-file, or the self-signed one it wrote under
	// --cert-dir) as dynamiccertificates.NewDynamicServingContentFromFiles,
	// and SecureServingInfo.Serve runs its controller (and the client CA's,
	// see authentication.OperatorIdentities) until the server stops: a
	// replaced certificate serves new connections without a restart, as in
	// kube-apiserver. The loopback client has a certificate of its own.
	if err := serving.ApplyTo(&generic.SecureServing); err != nil {
		return err
	}
	if err := applyLoopback(generic.SecureServing, &generic.LoopbackClientConfig); err != nil {
		return err
	}
	_, port, err := net.SplitHostPort(generic.SecureServing.Listener.Addr().String())
	if err != nil {
		return err
	}
	generic.ExternalAddress = net.JoinHostPort("localhost", port)
	return applyAuth(&generic.Config, opts.Authentication, derived, nil)
}

// applyLoopback gives the loopback client a serving certificate of its own
// and its configuration, as upstream's SecureServingOptionsWithLoopback
// does, with ECDSA keys: upstream generates two RSA-2048 keys (a CA and the
// certificate), 0.1–0.3 s of every start on two cores, before anything
// else can start.
func applyLoopback(info *genericapiserver.SecureServingInfo, loopback **rest.Config) error {
	name := genericapiserver.LoopbackClientServerNameOverride
	ca, err := pki.NewCA(name + "-ca")
	if err != nil {
		return fmt.Errorf("loopback certificate: %w", err)
	}
	certPEM, keyPEM, err := ca.IssuePeer(name, []string{name})
	if err != nil {
		return fmt.Errorf("loopback certificate: %w", err)
	}
	provider, err := dynamiccertificates.NewStaticSNICertKeyContent("self-signed loopback", certPEM, keyPEM, name)
	if err != nil {
		return fmt.Errorf("loopback certificate: %w", err)
	}
	// First, so that it wins over any other certificate for the name.
	info.SNICerts = append([]dynamiccertificates.SNICertKeyContentProvider{provider}, info.SNICerts...)
	cfg, err := info.NewLoopbackClientConfig(rand.Text(), ca.CertPEM)
	if err != nil {
		return err
	}
	*loopback = cfg
	return nil
}

// applyHierarchy translates the hierarchy options: it loads each peer's
// kubeconfig (the options only name the files) and builds the peer's one
// client (homes.NewPeer). A peer's configuration
// follows its kubeconfig's credentials while the server runs
// (reload.Kubeconfig): the loops that keep them current are added to
// derived's reloads. The set of peers and their addresses are fixed until
// the next start.
func applyHierarchy(o *options.HierarchyOptions, derived *derivedConfig) (HierarchyConfig, error) {
	sources, err := o.PeerSources()
	if err != nil {
		return HierarchyConfig{}, fmt.Errorf("--peer: %w", err)
	}
	passOn, err := o.PassOnResources()
	if err != nil {
		return HierarchyConfig{}, err
	}
	out := HierarchyConfig{CacheName: o.CacheName, FreshnessWait: o.FreshnessWait, AdoptShards: o.AdoptShards, PassOn: passOn}
	for _, src := range sources {
		cfg, watcher, err := reload.Kubeconfig(PeerKubeconfigSource(src.Name), src.Kubeconfig, src.Context)
		if err != nil {
			return HierarchyConfig{}, fmt.Errorf("peer %q: %w", src.Name, err)
		}
		peer, err := homes.NewPeer(src.Name, cfg)
		if err != nil {
			return HierarchyConfig{}, err
		}
		out.Peers = append(out.Peers, peer)
		derived.reloads = append(derived.reloads, watcher.Run)
	}
	return out, nil
}

// PeerKubeconfigSource names a peer's kubeconfig in logs and in the
// metrics of package reload.
func PeerKubeconfigSource(peer string) string { return "peer-kubeconfig:" + peer }

// applyMountedServing configures a cache without a listener of its own.
func applyMountedServing(generic *genericapiserver.RecommendedConfig, derived *derivedConfig, auth *options.AuthenticationOptions, host Host) error {
	loopback := rest.CopyConfig(host.LoopbackClientConfig)
	u, err := url.Parse(loopback.Host)
	if err != nil {
		return fmt.Errorf("parsing the host's loopback address: %w", err)
	}
	token, err := authentication.RandomToken()
	if err != nil {
		return err
	}
	derived.hostLoopback = rest.CopyConfig(loopback)
	loopback.Host = kcpcache.JoinHostPath(loopback.Host, kcpcache.ServicePrefix)
	loopback.BearerToken = token
	loopback.BearerTokenFile = ""
	generic.LoopbackClientConfig = loopback
	generic.SecureServing = nil // until applyAuth has run: see below
	generic.ExternalAddress = u.Host
	if host.Shard != "" {
		if err := kcpcache.ValidateShardName(host.Shard); err != nil {
			return fmt.Errorf("the host's shard: %w", err)
		}
		if derived.hostShardToken, err = authentication.RandomToken(); err != nil {
			return err
		}
		derived.hostShard = host.Shard
	}
	if err := applyAuth(&generic.Config, auth, derived, &host); err != nil {
		return err
	}
	// After applyAuth: the host's TLS configuration asks for client
	// certificates, not this listener's.
	generic.SecureServing = &genericapiserver.SecureServingInfo{Listener: newIdleListener()}
	return nil
}

// applyAuth sets explicit authentication and authorization. Both must be
// set: a nil authenticator or authorizer makes upstream skip the check.
//
// Authentication: the admin and loopback tokens (system:masters), then the
// operator's identities (--client-ca-file, --token-auth-file), then a
// host's authenticator, and anonymous only where anyone may go: the health
// endpoints, /version and --authorization-always-allow-paths.
// Authorization: the cache's rules first, so that their denials are final
// for every identity (a host's authorizer cannot widen them), then those
// paths for anyone, then the host's authorizer, then a named default deny.
func applyAuth(c *genericapiserver.Config, auth *options.AuthenticationOptions, derived *derivedConfig, host *Host) error {
	tokens := authentication.StaticTokens{Admin: derived.adminToken, HostShard: derived.hostShard, HostShardToken: derived.hostShardToken}
	authenticators := []authenticator.Request{tokens.Authenticator()}
	identities, err := authentication.OperatorIdentities(c, auth)
	if err != nil {
		return err
	}
	authenticators = append(authenticators, identities.Authenticators...)
	derived.reloads = append(derived.reloads, identities.Reloads...)
	if host != nil && host.Authenticator != nil {
		authenticators = append(authenticators, host.Authenticator)
	}
	pathAuthorizer, err := authzpath.NewAuthorizer(append(authentication.PublicPaths(), derived.alwaysAllowPaths...))
	if err != nil {
		return fmt.Errorf("--authorization-always-allow-paths: %w", err)
	}
	c.Authentication.Authenticator = authnunion.New(append(authenticators, authentication.AnonymousWhereAllowed(pathAuthorizer))...)
	// Order matters: the cache's own rules first, then the health paths, then
	// the host's authorizer (mounted), and a final deny with a reason.
	authorizers := []authorizer.Authorizer{authorization.New(), pathAuthorizer}
	if host != nil && host.Authorizer != nil {
		authorizers = append(authorizers, host.Authorizer)
	}
	authorizers = append(authorizers, authorization.NewDefaultDeny())
	c.Authorization.Authorizer = authzunion.New(authorizers...)
	genericapiserver.AuthorizeClientBearerToken(c.LoopbackClientConfig, &c.Authentication, &c.Authorization)
	return nil
}

// idleListener is a mounted cache's listener: it accepts nothing, for the
// host's listener serves the cache. Upstream's Run keys the stages of its
// shutdown on its listener stopping (drain the requests in flight, flush
// the audit backend, close the etcd health checks' clients); with this one
// a mounted cache takes every stage as a standalone server does.
type idleListener struct {
	closed    chan struct{}
	closeOnce sync.Once
}

func newIdleListener() *idleListener { return &idleListener{closed: make(chan struct{})} }

// Accept waits for Close.
func (l *idleListener) Accept() (net.Conn, error) {
	<-l.closed
	return nil, net.ErrClosed
}

func (l *idleListener) Close() error {
	l.closeOnce.Do(func() { close(l.closed) })
	return nil
}

// Addr is a loopback address no one can dial.
func (l *idleListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)} }
