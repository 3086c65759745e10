package shardserver

import (
	"path/filepath"

	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	cliflag "k8s.io/component-base/cli/flag"

	"github.com/kcp-cache/kcp-cache/cache/options"
	"github.com/kcp-cache/kcp-cache/cache/replication"
)

// DefaultSecurePort keeps a shard next to a standalone cache on 6443.
const DefaultSecurePort = 6444

// Options are a shard's options: its own API server and the cache options a
// kcp shard adds next to its own.
type Options struct {
	Server *options.Options
	Cache  *options.HostOptions
	// UserRead marks the workspaces pushed into the user-read partition.
	UserRead *replication.UserReadOptions
}

// CompletedOptions are options with defaults filled in.
type CompletedOptions struct {
	Server   options.CompletedOptions
	Cache    options.CompletedHostOptions
	UserRead *replication.UserReadOptions
}

// NewOptions returns a shard's defaults.
func NewOptions() *Options {
	o := &Options{Server: options.NewOptions(), Cache: options.NewHostOptions(), UserRead: replication.NewUserReadOptions()}
	o.Server.RootDirectory = ".kcp-shard"
	o.Server.SecureServing.BindPort = DefaultSecurePort
	o.Server.Etcd.StorageConfig.Prefix = "/shard"
	// Two shards on one machine must not fight over etcd's default ports.
	o.Server.EmbeddedEtcd.ClientPort, o.Server.EmbeddedEtcd.PeerPort = 0, 0
	return o
}

// AddFlags adds the shard's flags, by section.
func (o *Options) AddFlags(fss *cliflag.NamedFlagSets) {
	o.Server.AddFlags(fss)
	o.Cache.AddFlags(fss)
	o.UserRead.AddFlags(fss.FlagSet("User-read partition"))
}

// Complete fills in defaults.
func (o *Options) Complete() (CompletedOptions, error) {
	server, err := o.Server.Complete()
	if err != nil {
		return CompletedOptions{}, err
	}
	if o.Cache.CacheEmbeddedEtcdDirectory != "" && !filepath.IsAbs(o.Cache.CacheEmbeddedEtcdDirectory) {
		o.Cache.CacheEmbeddedEtcdDirectory = filepath.Join(server.RootDirectory, o.Cache.CacheEmbeddedEtcdDirectory)
	}
	cache, err := o.Cache.Complete()
	if err != nil {
		return CompletedOptions{}, err
	}
	return CompletedOptions{Server: server, Cache: cache, UserRead: o.UserRead}, nil
}

// Validate reports every invalid setting.
func (o CompletedOptions) Validate() error {
	errs := append(o.Server.Validate(), o.Cache.Validate()...)
	if o.UserRead != nil {
		errs = append(errs, o.UserRead.Validate()...)
	}
	return utilerrors.NewAggregate(errs)
}
