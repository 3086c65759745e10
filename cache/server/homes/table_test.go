package homes_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/server/homes"
)

// Who a shard's home is after east reads a peer's table: the highest
// generation wins, a lower one is ignored, the same generation naming
// another home is a conflict, and a claim naming east makes it the home.
func TestClaimsLearntFromAPeer(t *testing.T) {
	type claim = kcpcache.HomeClaim
	tests := []struct {
		name      string
		persisted string
		// tables are west's claims at each read.
		tables [][]claim
		// want is s's claim afterwards ("home/generation", "" for none),
		// conflict the other home of a conflict, elsewhere what
		// HomedElsewhere says, changes the changes of home reported
		// ("from>to").
		want      string
		conflict  string
		elsewhere bool
		changes   []string
	}{
		{name: "a shard with no claim: the peer's",
			tables: [][]claim{{{Shard: "s", Home: "west", Generation: 1}}},
			want:   "west/1", elsewhere: true, changes: []string{">west"}},
		{name: "a higher generation takes a shard held here away",
			persisted: `{"claims":[{"shard":"s","home":"east","generation":1}]}`,
			tables:    [][]claim{{{Shard: "s", Home: "west", Generation: 2}}},
			want:      "west/2", elsewhere: true, changes: []string{"east>west"}},
		{name: "a higher generation naming the same home changes no home",
			persisted: `{"claims":[{"shard":"s","home":"west","generation":1}]}`,
			tables:    [][]claim{{{Shard: "s", Home: "west", Generation: 2}}},
			want:      "west/2", elsewhere: true},
		{name: "a lower generation is ignored",
			persisted: `{"claims":[{"shard":"s","home":"west","generation":3}]}`,
			tables:    [][]claim{{{Shard: "s", Home: "south", Generation: 2}}},
			want:      "west/3", elsewhere: true},
		{name: "the same generation naming another home is a conflict",
			persisted: `{"claims":[{"shard":"s","home":"east","generation":1}]}`,
			tables:    [][]claim{{{Shard: "s", Home: "west", Generation: 1}}},
			want:      "east/1", conflict: "west"},
		{name: "a peer's table reporting a conflict of the same claim",
			persisted: `{"claims":[{"shard":"s","home":"west","generation":1}]}`,
			tables:    [][]claim{{{Shard: "s", Home: "west", Generation: 1, ConflictsWith: "south"}}},
			want:      "west/1", conflict: "south"},
		{name: "a higher generation ends a conflict",
			persisted: `{"claims":[{"shard":"s","home":"east","generation":1}]}`,
			tables:    [][]claim{{{Shard: "s", Home: "west", Generation: 1}}, {{Shard: "s", Home: "west", Generation: 2}}},
			want:      "west/2", elsewhere: true, changes: []string{"east>west"}},
		{name: "a claim naming this cache makes it the home again (its storage was lost)",
			tables: [][]claim{{{Shard: "s", Home: "east", Generation: 4}}},
			want:   "east/4", changes: []string{">east"}},
		{name: "claims without a home, a generation or a valid shard are ignored",
			tables: [][]claim{{{Shard: "s", Home: "", Generation: 1}, {Shard: "s", Home: "west", Generation: 0}, {Shard: "S_1", Home: "west", Generation: 1}}},
			want:   ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			table, store := newTable(t, tableConfig{persisted: tc.persisted, peers: map[string]peerSpec{"west": {tables: tc.tables}}})
			var changes []string
			table.OnHomeChange(func(_ context.Context, shard, from, to string) { changes = append(changes, from+">"+to) })
			for range tc.tables {
				table.AskPeers(context.Background(), "")
			}
			if got := claimOf(table, "s"); got != tc.want {
				t.Errorf("claim %q, want %q", got, tc.want)
			}
			if _, conflict, _ := table.Lookup("s"); conflict != tc.conflict {
				t.Errorf("conflict with %q, want %q", conflict, tc.conflict)
			}
			if home, _, elsewhere := table.HomedElsewhere("s"); elsewhere != tc.elsewhere || elsewhere && home != "west" {
				t.Errorf("homed elsewhere: %v %q, want %v", elsewhere, home, tc.elsewhere)
			}
			if _, _, ok := table.Lookup("S_1"); ok {
				t.Error("a claim of an invalid shard name was learnt")
			}
			if strings.Join(changes, " ") != strings.Join(tc.changes, " ") {
				t.Errorf("changes of home %q, want %q", changes, tc.changes)
			}
			// The claim, not the conflict, is what a restart reads back.
			again, err := homes.New(homes.Config{CacheName: "east", Store: store})
			if err != nil {
				t.Fatal(err)
			}
			if err := again.Load(context.Background()); err != nil {
				t.Fatal(err)
			}
			if got := claimOf(again, "s"); got != tc.want {
				t.Errorf("claim persisted %q, want %q", got, tc.want)
			}
		})
	}
}

// The table's answer at kcpcache.HomesPath: every claim or one shard's,
// held or not, with the conflicts; GET only.
// eastRoutes are the routes east's table offers with west its one peer:
// its own, and west's, which it takes from west itself (no mirror tells
// the table the epoch of its copies here).
var eastRoutes = []kcpcache.Route{{Home: "east", Path: []string{"east"}, Epoch: "e-east"}, {Home: "west", Path: []string{"east", "west"}}}

func TestTableHandler(t *testing.T) {
	table, _ := newTable(t, tableConfig{
		persisted: `{"claims":[{"shard":"s-a","home":"east","generation":1},{"shard":"s-b","home":"west","generation":2}]}`,
		peers:     map[string]peerSpec{"west": {claims: []kcpcache.HomeClaim{{Shard: "s-a", Home: "west", Generation: 1}}}},
	})
	table.AskPeers(context.Background(), "")
	tests := []struct {
		name, method, query string
		wantCode            int
		want                *kcpcache.HomesAnswer
	}{
		{"every shard", http.MethodGet, "", http.StatusOK, &kcpcache.HomesAnswer{Cache: "east", Epoch: "e-east", Routes: eastRoutes, Claims: []kcpcache.HomeClaim{
			{Shard: "s-a", Home: "east", Generation: 1, Held: true, ConflictsWith: "west"},
			{Shard: "s-b", Home: "west", Generation: 2},
		}}},
		{"one shard", http.MethodGet, "?shard=s-b", http.StatusOK, &kcpcache.HomesAnswer{Cache: "east", Epoch: "e-east", Routes: eastRoutes, Claims: []kcpcache.HomeClaim{
			{Shard: "s-b", Home: "west", Generation: 2},
		}}},
		{"a shard nobody claims", http.MethodGet, "?shard=s-c", http.StatusOK, &kcpcache.HomesAnswer{Cache: "east", Epoch: "e-east", Routes: eastRoutes, Claims: []kcpcache.HomeClaim{}}},
		{"an invalid shard name", http.MethodGet, "?shard=S_1", http.StatusBadRequest, nil},
		{"a write", http.MethodPost, "", http.StatusMethodNotAllowed, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			table.Handler().ServeHTTP(rec, httptest.NewRequest(tc.method, kcpcache.HomesPath+tc.query, nil))
			if rec.Code != tc.wantCode {
				t.Fatalf("status %d, want %d: %s", rec.Code, tc.wantCode, rec.Body)
			}
			if tc.want == nil {
				return
			}
			var got kcpcache.HomesAnswer
			if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(&got, tc.want) {
				t.Errorf("answer %+v, want %+v", got, *tc.want)
			}
		})
	}
}
