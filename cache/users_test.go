package cache

import "testing"

// Only a valid shard name after the prefix makes a user a shard.
func TestShardUsersNameValidShards(t *testing.T) {
	for _, tt := range []struct {
		user  string
		shard string
		ok    bool
	}{
		{"system:kcp:shard:amber", "amber", true},
		{ShardUser("root:east"), "root:east", true},
		{"system:kcp:shard:", "", false},
		{"system:kcp:shard:Amber", "", false},
		{"system:kcp:shard:a/b", "", false},
		{"amber", "", false},
		{"system:kcp:shards:amber", "", false},
	} {
		shard, ok := ShardFromUser(tt.user)
		if shard != tt.shard || ok != tt.ok {
			t.Errorf("ShardFromUser(%q) = %q, %v; want %q, %v", tt.user, shard, ok, tt.shard, tt.ok)
		}
	}
}

// Names starting with system:cache and the system partition's are the
// cache's own.
func TestReservedNamesAreTheCachesOwn(t *testing.T) {
	for name, want := range map[string]bool{
		SystemShard: true, SystemCluster: true, "system:cache": true, "system:cache:other": true, "system:cachex": true,
		"root": false, "system:admin": false, "system:shard": false, "cache": false,
	} {
		if got := IsReservedName(name); got != want {
			t.Errorf("IsReservedName(%q) = %v, want %v", name, got, want)
		}
	}
}
