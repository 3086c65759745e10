package cache

import "strings"

const (
	// ShardUserPrefix starts the user name of a shard's identity: shard s
	// authenticates as ShardUserPrefix+s and may write only its own partition.
	ShardUserPrefix = "system:kcp:shard:"

	// ReadersGroup is the group of consumers that read every partition and
	// never write (the server's authorizer refuses their writes).
	ReadersGroup = "system:kcp:cache:readers"

	// MetricsReadersGroup is the group of monitoring clients (a Prometheus
	// scraper): they read /metrics and the health endpoints and nothing
	// else, no object of any partition.
	MetricsReadersGroup = "system:kcp:cache:metrics-readers"

	// reservedPrefix starts shard and cluster names that belong to the cache
	// itself, like its system partition's shard.
	reservedPrefix = "system:cache"
)

// ShardUser is the user name shard authenticates as.
func ShardUser(shard string) string { return ShardUserPrefix + shard }

// ShardFromUser returns the shard a user name is the identity of.
func ShardFromUser(name string) (string, bool) {
	shard, ok := strings.CutPrefix(name, ShardUserPrefix)
	if !ok || ValidateShardName(shard) != nil {
		return "", false
	}
	return shard, true
}

// IsReservedName reports whether a shard or cluster name belongs to the
// cache itself: it starts with "system:cache" or names the system partition.
// Such names are refused in partition paths for all but system:masters.
func IsReservedName(name string) bool {
	return strings.HasPrefix(name, reservedPrefix) || name == SystemShard || name == SystemCluster
}
