package mirror

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/server/homes"
)

// Why a consistent read at east of data homed at its peer west (or
// elsewhere) is refused, before any stream has listed: the reasons the
// claims and the home's answer decide.
func TestConfirmRefusals(t *testing.T) {
	apiexports := schema.GroupResource{Group: "apis.kcp.io", Resource: "apiexports"}
	tests := []struct {
		name  string
		shard string
		// claims is west's table (read twice before the read); revision
		// west's answer at the revision path, 0 for a 500.
		claims   []kcpcache.HomeClaim
		revision int64
		// held holds s's partition as after west's epoch changed.
		held bool
		// want are the refusals as "reason home", wantBehind the home's
		// revision a MirrorBehind names.
		want       []string
		wantBehind int64
	}{
		{name: "a shard homed here: nothing to confirm", shard: "s",
			claims: []kcpcache.HomeClaim{{Shard: "s", Home: "east", Generation: 1}}},
		{name: "a shard homed at a cache no peer offers a route to", shard: "s",
			claims: []kcpcache.HomeClaim{{Shard: "s", Home: "north", Generation: 1}},
			want:   []string{"HomeNoRoute north"}},
		{name: "two claims of one generation", shard: "s",
			claims: []kcpcache.HomeClaim{{Shard: "s", Home: "west", Generation: 1, ConflictsWith: "south"}},
			want:   []string{"HomeConflict west"}},
		{name: "the home does not answer its revision", shard: "s",
			claims: []kcpcache.HomeClaim{{Shard: "s", Home: "west", Generation: 1}},
			want:   []string{"HomeUnreachable west"}},
		{name: "the home answers, the mirror has not listed the type from it", shard: "s",
			claims: []kcpcache.HomeClaim{{Shard: "s", Home: "west", Generation: 1}}, revision: 7,
			want: []string{"MirrorBehind west"}, wantBehind: 7},
		{name: "the partition is held after the home's epoch changed", shard: "s",
			claims: []kcpcache.HomeClaim{{Shard: "s", Home: "west", Generation: 1}}, revision: 7, held: true,
			want: []string{"HomeRestored west"}},
		{name: "every shard: each home no peer offers a route to", shard: kcpcache.Wildcard,
			claims: []kcpcache.HomeClaim{{Shard: "s", Home: "north", Generation: 1}, {Shard: "t", Home: "south", Generation: 2}, {Shard: "u", Home: "west", Generation: 1}}, revision: 7,
			want: []string{"HomeNoRoute north", "HomeNoRoute south"}},
		{name: "a shard whose claim is not known yet: asked of the peers first", shard: "u",
			claims: []kcpcache.HomeClaim{{Shard: "u", Home: "north", Generation: 1}},
			want:   []string{"HomeNoRoute north"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			west := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				var ans any
				switch r.URL.Path {
				case kcpcache.HomesPath:
					ans = kcpcache.HomesAnswer{Cache: "west", Epoch: "e1", Claims: tc.claims}
				case kcpcache.RevisionPath:
					if tc.revision == 0 {
						http.Error(w, "down", http.StatusInternalServerError)
						return
					}
					ans = kcpcache.HomeRevisionAnswer{Cache: "west", Epoch: "e1", Revision: tc.revision}
				default:
					http.NotFound(w, r)
					return
				}
				_ = json.NewEncoder(w).Encode(ans)
			}))
			defer west.Close()
			peer, err := homes.NewPeer("west", &rest.Config{Host: west.URL})
			if err != nil {
				t.Fatal(err)
			}
			table, err := homes.New(homes.Config{CacheName: "east", Peers: []*homes.Peer{peer}, FreshnessWait: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			m, err := New(Config{CacheName: "east", Peers: []*homes.Peer{peer}, Local: &rest.Config{Host: "https://127.0.0.1:1"},
				Resources: func() []schema.GroupVersionResource { return nil }, FreshnessWait: 5 * time.Second, Homes: table})
			if err != nil {
				t.Fatal(err)
			}
			if tc.shard != "u" {
				// What the table's loop would have read by now.
				table.AskPeers(ctx, "")
				table.AskPeers(ctx, "")
			}
			if tc.held {
				m.peers["west"].holds.hold(ctx, "west", "west", "e2", []string{"s"})
			}
			entries, failed := m.Confirm(ctx, tc.shard, apiexports)
			var got []string
			for _, c := range statusCauses(failed) {
				got = append(got, string(c.Type)+" "+c.Field)
			}
			if strings.Join(got, ", ") != strings.Join(tc.want, ", ") {
				t.Errorf("refused %q, want %q", got, tc.want)
			}
			if len(entries) != 0 {
				t.Errorf("confirmed %+v, want nothing (no stream has listed)", entries)
			}
			for _, f := range failed {
				if f.Reason == ReasonMirrorBehind && (f.Want != tc.wantBehind || f.Have != 0) {
					t.Errorf("behind: want %d have %d, want %d have 0", f.Want, f.Have, tc.wantBehind)
				}
			}
		})
	}
}
