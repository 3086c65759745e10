package removal

import "time"

// Config says when the data of what is gone is removed (see the options of
// the same names).
type Config struct {
	// ShardRetention is how long a shard's heartbeat may be expired before
	// its partition is purged; zero never purges by expiry.
	ShardRetention time.Duration
	// TypeRetention is how long a runtime type may hold no objects before
	// its CRD is deleted; zero keeps every type.
	TypeRetention time.Duration
	// CheckInterval is how often both are checked.
	CheckInterval time.Duration
}
