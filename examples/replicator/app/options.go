package app

import (
	"fmt"
	"time"

	cliflag "k8s.io/component-base/cli/flag"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/replication"
)

// DefaultShardContext is the context of a kcp shard's admin.kubeconfig that
// reaches the shard's base URL as its admin (system:masters), as wildcard
// requests across its logical clusters need.
const DefaultShardContext = "shard-base"

// Options are the replicator's settings.
type Options struct {
	// ShardKubeconfig reaches the kcp shard as its admin; ShardContext is
	// the context to use ("": DefaultShardContext when the kubeconfig has
	// it, else the current one).
	ShardKubeconfig string
	ShardContext    string
	// ShardName is the shard's name, as the shard's --shard-name.
	ShardName string
	// CacheKubeconfig reaches the cache, best with the shard's identity
	// (system:kcp:shard:<shard-name>); CacheContext is its context ("":
	// the current one).
	CacheKubeconfig string
	CacheContext    string
	// Workers is how many objects are reconciled at once.
	Workers int
	// HeartbeatInterval is how often the user-read partition's heartbeat
	// is renewed.
	HeartbeatInterval time.Duration
	// UserRead marks the workspaces and names the types.
	UserRead *replication.UserReadOptions
}

// NewOptions returns the defaults.
func NewOptions() *Options {
	return &Options{
		ShardName:         "root",
		Workers:           replication.DefaultWorkers,
		HeartbeatInterval: 5 * time.Second,
		UserRead:          replication.NewUserReadOptions(),
	}
}

// AddFlags adds the flags, by section.
func (o *Options) AddFlags(fss *cliflag.NamedFlagSets) {
	fs := fss.FlagSet("Replicator")
	fs.StringVar(&o.ShardKubeconfig, "kubeconfig", o.ShardKubeconfig,
		"Kubeconfig of the kcp shard, as its admin: the shard's admin.kubeconfig. The replicator lists and watches across the shard's logical clusters (/clusters/*), which needs system:masters.")
	fs.StringVar(&o.ShardContext, "context", o.ShardContext,
		"Context of --kubeconfig to use; empty means "+DefaultShardContext+" when the kubeconfig has it (kcp's admin.kubeconfig does), else its current context.")
	fs.StringVar(&o.ShardName, "shard-name", o.ShardName, "Name of the kcp shard, as its --shard-name: the replicator writes the partition <shard-name>"+kcpcache.UserReadSuffix+".")
	fs.StringVar(&o.CacheKubeconfig, "cache-kubeconfig", o.CacheKubeconfig,
		"Kubeconfig of the cache server, as the shard's --cache-kubeconfig; its credentials should be the shard's identity, user system:kcp:shard:<shard-name>, which may write the shard's user-read partition.")
	fs.StringVar(&o.CacheContext, "cache-context", o.CacheContext, "Context of --cache-kubeconfig to use; empty means its current context.")
	fs.IntVar(&o.Workers, "workers", o.Workers, "Number of objects reconciled at once.")
	fs.DurationVar(&o.HeartbeatInterval, "heartbeat-interval", o.HeartbeatInterval,
		"How often the user-read partition's heartbeat is renewed in the cache; its lease lasts four intervals.")
	o.UserRead.AddFlags(fss.FlagSet("User-read partition"))
}

// Validate reports every invalid setting.
func (o *Options) Validate() []error {
	var errs []error
	if o.ShardKubeconfig == "" {
		errs = append(errs, fmt.Errorf("--kubeconfig is required: the kcp shard's admin kubeconfig"))
	}
	if o.CacheKubeconfig == "" {
		errs = append(errs, fmt.Errorf("--cache-kubeconfig is required"))
	}
	if err := kcpcache.ValidateShardName(o.ShardName); err != nil {
		errs = append(errs, fmt.Errorf("--shard-name: %w", err))
	}
	if o.Workers < 1 {
		errs = append(errs, fmt.Errorf("--workers must be at least 1, got %d", o.Workers))
	}
	if o.HeartbeatInterval < time.Second/4 {
		errs = append(errs, fmt.Errorf("--heartbeat-interval must be at least 250ms, got %s", o.HeartbeatInterval))
	}
	errs = append(errs, o.UserRead.Validate()...)
	if !o.UserRead.Enabled() {
		errs = append(errs, fmt.Errorf("nothing to replicate: mark workspaces with --user-read-workspaces or --user-read-workspace-types"))
	}
	return errs
}
