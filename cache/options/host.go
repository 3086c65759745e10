package options

import (
	"fmt"
	"net/url"

	cliflag "k8s.io/component-base/cli/flag"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

// DefaultShardName is kcp's name for its first shard.
const DefaultShardName = "root"

// HostOptions are what a host server (a kcp shard) adds next to its own
// options to push into, read from and optionally serve a cache.
type HostOptions struct {
	// RunCacheServer serves a cache in the host process, under
	// /services/cache/ of the host's own listener.
	RunCacheServer bool
	// CacheURL and CacheKubeconfig say where the cache is. With
	// RunCacheServer and neither set, the host uses its in-process cache.
	CacheURL        string
	CacheKubeconfig string
	// ShardName is this shard's partition in the cache.
	ShardName string
	// CacheEtcdPrefix keeps the in-process cache's data apart from the
	// host's when both use the host's etcd.
	CacheEtcdPrefix string
	// CacheEmbeddedEtcdDirectory, when set, gives the in-process cache an
	// embedded etcd of its own instead of the host's etcd.
	CacheEmbeddedEtcdDirectory string

	// hostFlags are settings the host owns the flags of (WithHostFlags).
	hostFlags HostFlags
}

// HostFlags point at values a host already has flags for: kcp defines
// --shard-name and --cache-kubeconfig itself. For each non-nil pointer,
// AddFlags registers no flag of that name (pflag refuses a name twice) and
// Complete takes the host's value.
type HostFlags struct {
	ShardName       *string
	CacheKubeconfig *string
}

// WithHostFlags makes o use the host's flags for the settings hf points at.
// Call it before AddFlags.
func (o *HostOptions) WithHostFlags(hf HostFlags) *HostOptions {
	o.hostFlags = hf
	return o
}

// CompletedHostOptions are host options with defaults filled in.
type CompletedHostOptions struct {
	*completedHostOptions
}

type completedHostOptions struct {
	HostOptions
	// InProcessCache is true when the host pushes to and reads from the
	// cache it serves itself.
	InProcessCache bool
}

// NewHostOptions returns kcp-compatible defaults.
func NewHostOptions() *HostOptions {
	return &HostOptions{ShardName: DefaultShardName, CacheEtcdPrefix: DefaultEtcdPrefix}
}

// AddFlags adds the flags to the "Cache server" section.
func (o *HostOptions) AddFlags(fss *cliflag.NamedFlagSets) {
	fs := fss.FlagSet("Cache server")
	fs.BoolVar(&o.RunCacheServer, "run-cache-server", o.RunCacheServer,
		"Serve a cache server in this process under /services/cache/ of this server's port.")
	fs.StringVar(&o.CacheURL, "cache-url", o.CacheURL,
		"URL of the cache server to push to and read from, e.g. https://cache.example:6443. With --run-cache-server and no --cache-url or --cache-kubeconfig, this process's own cache is used.")
	if o.hostFlags.CacheKubeconfig == nil {
		fs.StringVar(&o.CacheKubeconfig, "cache-kubeconfig", o.CacheKubeconfig,
			"Kubeconfig of the cache server to push to and read from (alternative to --cache-url); its credentials should be this shard's own identity, user system:kcp:shard:<shard-name>, which may write only this shard's partition.")
	}
	if o.hostFlags.ShardName == nil {
		fs.StringVar(&o.ShardName, "shard-name", o.ShardName, "Name of this shard: its partition in the cache.")
	}
	fs.StringVar(&o.CacheEtcdPrefix, "cache-etcd-prefix", o.CacheEtcdPrefix,
		"With --run-cache-server: etcd key prefix of the cache's data in this server's etcd.")
	fs.StringVar(&o.CacheEmbeddedEtcdDirectory, "cache-embedded-etcd-directory", o.CacheEmbeddedEtcdDirectory,
		"With --run-cache-server: run an embedded etcd for the cache in this directory instead of using this server's etcd.")
}

// Complete takes the host's values and derives where the cache is.
func (o *HostOptions) Complete() (CompletedHostOptions, error) {
	if o.hostFlags.ShardName != nil {
		o.ShardName = *o.hostFlags.ShardName
	}
	if o.hostFlags.CacheKubeconfig != nil {
		o.CacheKubeconfig = *o.hostFlags.CacheKubeconfig
	}
	c := &completedHostOptions{HostOptions: *o}
	c.InProcessCache = o.RunCacheServer && o.CacheURL == "" && o.CacheKubeconfig == ""
	return CompletedHostOptions{c}, nil
}

// Validate reports contradictory or invalid settings.
func (o CompletedHostOptions) Validate() []error {
	var errs []error
	if err := kcpcache.ValidateShardName(o.ShardName); err != nil {
		errs = append(errs, fmt.Errorf("--shard-name: %w", err))
	}
	if o.CacheURL != "" && o.CacheKubeconfig != "" {
		errs = append(errs, fmt.Errorf("--cache-url and --cache-kubeconfig both name the cache; set one"))
	}
	if !o.RunCacheServer && o.CacheURL == "" && o.CacheKubeconfig == "" {
		errs = append(errs, fmt.Errorf("no cache: set --cache-url or --cache-kubeconfig, or --run-cache-server to serve one in this process"))
	}
	if o.CacheURL != "" {
		if u, err := url.Parse(o.CacheURL); err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
			errs = append(errs, fmt.Errorf("--cache-url %q must be an absolute http(s) URL", o.CacheURL))
		}
	}
	if !o.RunCacheServer {
		if o.CacheEmbeddedEtcdDirectory != "" {
			errs = append(errs, fmt.Errorf("--cache-embedded-etcd-directory needs --run-cache-server"))
		}
		if o.CacheEtcdPrefix != DefaultEtcdPrefix {
			errs = append(errs, fmt.Errorf("--cache-etcd-prefix needs --run-cache-server"))
		}
	}
	if o.RunCacheServer && o.CacheEtcdPrefix == "" && o.CacheEmbeddedEtcdDirectory == "" {
		errs = append(errs, fmt.Errorf("--cache-etcd-prefix must not be empty when the cache shares this server's etcd"))
	}
	return errs
}
