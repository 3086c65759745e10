package homes_test

import (
	"context"
	"strings"
	"testing"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

// --adopt-shard=s at east: east claims s one generation above the highest
// claim it or a reachable peer knows, once per cache and shard.
func TestAdoptShard(t *testing.T) {
	tests := []struct {
		name string
		tableConfig
		// want is s's claim afterwards, conflict its conflict, adopted
		// what AdoptedHere says.
		want     string
		conflict string
		adopted  []string
	}{
		{name: "a shard nobody claims: generation 1",
			want: "east/1", adopted: []string{"s"}},
		{name: "a peer's claim: one generation above it",
			tableConfig: tableConfig{peers: map[string]peerSpec{"west": {claims: []kcpcache.HomeClaim{{Shard: "s", Home: "west", Generation: 2}}}}},
			want:        "east/3", adopted: []string{"s"}},
		{name: "a persisted claim, the peer down: one generation above the persisted one",
			tableConfig: tableConfig{persisted: `{"claims":[{"shard":"s","home":"west","generation":4}]}`, peers: map[string]peerSpec{"west": {down: true}}},
			want:        "east/5", adopted: []string{"s"}},
		{name: "a conflict: resolved",
			tableConfig: tableConfig{persisted: `{"claims":[{"shard":"s","home":"south","generation":1}]}`, peers: map[string]peerSpec{"west": {claims: []kcpcache.HomeClaim{{Shard: "s", Home: "west", Generation: 1}}}}},
			want:        "east/2", adopted: []string{"s"}},
		{name: "acted before on this cache: not again",
			tableConfig: tableConfig{persisted: `{"claims":[{"shard":"s","home":"west","generation":3}],"adopted":{"s":2}}`},
			want:        "west/3"},
		{name: "acted before, and the shard moved on since: not here",
			tableConfig: tableConfig{persisted: `{"claims":[{"shard":"s","home":"east","generation":2}],"adopted":{"s":2}}`, peers: map[string]peerSpec{"west": {claims: []kcpcache.HomeClaim{{Shard: "s", Home: "west", Generation: 3}}}}},
			want:        "west/3"},
		{name: "acted before, still here",
			tableConfig: tableConfig{persisted: `{"claims":[{"shard":"s","home":"east","generation":2}],"adopted":{"s":2}}`},
			want:        "east/2", adopted: []string{"s"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.adopt = []string{"s"}
			table, store := newTable(t, tc.tableConfig)
			ctx, cancel := context.WithCancel(context.Background())
			ran := make(chan struct{})
			go func() {
				defer close(ran)
				table.Run(ctx)
			}()
			adopted := table.AdoptedHere(ctx) // once --adopt-shard has acted
			cancel()
			<-ran
			if got := claimOf(table, "s"); got != tc.want {
				t.Errorf("claim %q, want %q", got, tc.want)
			}
			if _, conflict, _ := table.Lookup("s"); conflict != tc.conflict {
				t.Errorf("conflict with %q, want %q", conflict, tc.conflict)
			}
			if strings.Join(adopted, " ") != strings.Join(tc.adopted, " ") {
				t.Errorf("adopted here %q, want %q", adopted, tc.adopted)
			}
			if err := table.Admit(context.Background(), "s"); (err == nil) != strings.HasPrefix(tc.want, "east/") {
				t.Errorf("a write after the adoption: %v, want it accepted only if east is the home", err)
			}

			// A restart with the same flag does not adopt again.
			again, _ := newTable(t, tableConfig{persisted: string(store.data), adopt: []string{"s"}})
			ctx, cancel = context.WithCancel(context.Background())
			ran = make(chan struct{})
			go func() {
				defer close(ran)
				again.Run(ctx)
			}()
			again.AdoptedHere(ctx)
			cancel()
			<-ran
			if got := claimOf(again, "s"); got != tc.want {
				t.Errorf("after a restart with the same flag: claim %q, want %q", got, tc.want)
			}
		})
	}
}
