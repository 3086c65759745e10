package options

import (
	"fmt"
	"time"

	"github.com/spf13/pflag"
)

const (
	// DefaultShardRetention is how long a shard's heartbeat may be expired
	// before its partition is purged: a day, so that a shard down for
	// maintenance or a long outage keeps its copies.
	DefaultShardRetention = 24 * time.Hour
	// DefaultTypeRetention is how long a type added at runtime may hold no
	// objects before it is removed.
	DefaultTypeRetention = 24 * time.Hour
	// DefaultRemovalCheckInterval is how often heartbeats and unused types
	// are checked.
	DefaultRemovalCheckInterval = time.Minute
)

// RemovalOptions say when the cache removes the data of what is gone: the
// partitions of shards that stopped for good, and types nobody uses.
type RemovalOptions struct {
	// ShardRetention is how long a shard's heartbeat may be expired before
	// its partition is purged; zero never purges by expiry (a deleted Shard
	// object still purges).
	ShardRetention time.Duration
	// TypeRetention is how long a type added at runtime may hold no objects
	// in any partition before its CRD is deleted; zero keeps every type.
	TypeRetention time.Duration
	// CheckInterval is how often both are checked.
	CheckInterval time.Duration
}

// NewRemovalOptions returns the defaults.
func NewRemovalOptions() *RemovalOptions {
	return &RemovalOptions{ShardRetention: DefaultShardRetention, TypeRetention: DefaultTypeRetention, CheckInterval: DefaultRemovalCheckInterval}
}

// AddFlags adds the flags to fs.
func (o *RemovalOptions) AddFlags(fs *pflag.FlagSet) {
	fs.DurationVar(&o.ShardRetention, "shard-retention", o.ShardRetention,
		"How long a shard's heartbeat may be expired before its whole partition (every type) is purged. 0 never purges by expiry. A shard without a heartbeat is purged only when its core.kcp.io Shard object is deleted; a shard that comes back pushes again.")
	fs.DurationVar(&o.TypeRetention, "type-retention", o.TypeRetention,
		"How long a type added at runtime (a CRD that is not bootstrapped) may hold no objects in any partition before its CRD is deleted. 0 keeps every type.")
	fs.DurationVar(&o.CheckInterval, "removal-check-interval", o.CheckInterval,
		"How often shard heartbeats and unused types are checked.")
}

// Validate checks the durations.
func (o *RemovalOptions) Validate() []error {
	var errs []error
	if o.ShardRetention < 0 {
		errs = append(errs, fmt.Errorf("--shard-retention must not be negative, got %s", o.ShardRetention))
	}
	if o.TypeRetention < 0 {
		errs = append(errs, fmt.Errorf("--type-retention must not be negative, got %s", o.TypeRetention))
	}
	if o.CheckInterval <= 0 {
		errs = append(errs, fmt.Errorf("--removal-check-interval must be positive, got %s", o.CheckInterval))
	}
	return errs
}
