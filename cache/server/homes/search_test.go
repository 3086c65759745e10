package homes_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/server/homes"
)

// searchNet is a set of real tables, each served over HTTP, peering along
// edges: a search crosses them as it crosses caches.
type searchNet struct {
	tables map[string]*homes.Table
	urls   map[string]string
	// asked counts the searches each table's handler answered.
	asked map[string]*atomic.Int64
}

// startSearchNet starts a table per name of edges (both ways); the names
// in down have an address nobody answers at.
func startSearchNet(t *testing.T, edges [][2]string, down ...string) *searchNet {
	t.Helper()
	n := &searchNet{tables: map[string]*homes.Table{}, urls: map[string]string{}, asked: map[string]*atomic.Int64{}}
	peers := map[string][]string{}
	for _, e := range edges {
		peers[e[0]] = append(peers[e[0]], e[1])
		peers[e[1]] = append(peers[e[1]], e[0])
	}
	handlers := map[string]*atomic.Pointer[http.Handler]{}
	for name := range peers {
		h := &atomic.Pointer[http.Handler]{}
		handlers[name] = h
		count := &atomic.Int64{}
		n.asked[name] = count
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Query().Get(kcpcache.SearchParameter) != "" {
				count.Add(1)
			}
			(*h.Load()).ServeHTTP(w, r)
		}))
		n.urls[name] = srv.URL
		if slices.Contains(down, name) {
			srv.Close()
		} else {
			t.Cleanup(srv.Close)
		}
	}
	for name, ps := range peers {
		cfg := homes.Config{CacheName: name, Epoch: func() string { return "e-" + name }, FreshnessWait: 2 * time.Second, PollInterval: time.Hour}
		for _, p := range ps {
			peer, err := homes.NewPeer(p, &rest.Config{Host: n.urls[p]})
			if err != nil {
				t.Fatal(err)
			}
			cfg.Peers = append(cfg.Peers, peer)
		}
		table, err := homes.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		h := table.Handler()
		handlers[name].Store(&h)
		n.tables[name] = table
	}
	return n
}

// TestSearchReachesEveryCache: a claim searches every cache of the
// hierarchy, however far: in a chain a - b - c - d, d is refused a shard a
// claimed moments ago (no poll ran), a cache that does not answer makes
// the search name it and the cache that asked it, and a ring's searches
// reach every cache once without naming one unreached that another path
// reached.
func TestSearchReachesEveryCache(t *testing.T) {
	ctx := context.Background()
	t.Run("a chain: a claim three hops away is found", func(t *testing.T) {
		n := startSearchNet(t, [][2]string{{"a", "b"}, {"b", "c"}, {"c", "d"}})
		if err := n.tables["a"].Admit(ctx, "s"); err != nil {
			t.Fatalf("a claiming s: %v", err)
		}
		for _, name := range []string{"b", "c", "d"} {
			if got := n.tables[name].PendingShards(); got["s"] != "a" {
				t.Errorf("%s's pending shards after a's claim: %v, want s claimed by a", name, got)
			}
		}
		err := n.tables["d"].Admit(ctx, "s")
		if err == nil || err.ErrStatus.Code != http.StatusForbidden {
			t.Fatalf("d taking s's write after a claimed it: %v, want 403 naming a", err)
		}
		if c, _, ok := n.tables["d"].Lookup("s"); !ok || c.Home != "a" {
			t.Fatalf("d's claim of s: %+v, %v; want a's", c, ok)
		}
		if got := n.tables["d"].PendingShards(); len(got) != 0 {
			t.Errorf("d's pending shards once it knows s's claim: %v, want none", got)
		}
	})
	t.Run("a cache that does not answer is named, with the cache that asked it", func(t *testing.T) {
		n := startSearchNet(t, [][2]string{{"a", "b"}, {"b", "c"}, {"c", "d"}}, "c")
		o := n.tables["a"].Search(ctx, "s", false)
		if len(o.Unreached) != 1 || o.Unreached[0].Cache != "c" || o.Unreached[0].Via != "b" {
			t.Fatalf("a's search with c down: unreached %+v, want c asked by b", o.Unreached)
		}
		err := n.tables["a"].Admit(ctx, "s")
		if err == nil || err.ErrStatus.Code != http.StatusServiceUnavailable || err.ErrStatus.Details == nil ||
			len(err.ErrStatus.Details.Causes) != 1 || err.ErrStatus.Details.Causes[0].Field != "c" {
			t.Fatalf("a claiming s with c down: %v, want 503 with one cause naming c", err)
		}
		if _, _, ok := n.tables["a"].Lookup("s"); ok {
			t.Fatal("a claimed s though c did not answer")
		}
	})
	t.Run("a ring: every cache reached once, none named unreached", func(t *testing.T) {
		n := startSearchNet(t, [][2]string{{"a", "b"}, {"b", "c"}, {"c", "d"}, {"d", "a"}, {"a", "c"}})
		o := n.tables["a"].Search(ctx, "s", false)
		if len(o.Unreached) != 0 || len(o.Claiming) != 0 {
			t.Fatalf("a's search in a ring: %+v, want every cache reached", o)
		}
		if err := n.tables["b"].Admit(ctx, "s"); err != nil {
			t.Fatalf("b claiming s in the ring: %v", err)
		}
		for _, name := range []string{"a", "c", "d"} {
			if got := n.tables[name].PendingShards(); got["s"] != "b" {
				t.Errorf("%s's pending shards after b's claim: %v, want s claimed by b", name, got)
			}
		}
		for name, c := range n.asked {
			// Two searches crossed the ring; a cache's peers each ask it
			// at most once a search (the first arrival is forwarded,
			// later ones answer at once as duplicates).
			if got, most := c.Load(), int64(2*4); got > most || got == 0 {
				t.Errorf("%s answered %d searches' questions, want 1..%d", name, got, most)
			}
		}
	})
	t.Run("a cache claiming the shard when asked is named, two hops away", func(t *testing.T) {
		// a - b - c: c (a fake) is claiming s; b is a real table.
		c := startPeer(t, "c", peerSpec{claiming: []string{"s"}})
		b, err := homes.New(homes.Config{CacheName: "b", FreshnessWait: 2 * time.Second, PollInterval: time.Hour, Peers: []*homes.Peer{c}})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(b.Handler())
		t.Cleanup(srv.Close)
		pb, err := homes.NewPeer("b", &rest.Config{Host: srv.URL})
		if err != nil {
			t.Fatal(err)
		}
		a, err := homes.New(homes.Config{CacheName: "a", FreshnessWait: 2 * time.Second, PollInterval: time.Hour, Peers: []*homes.Peer{pb}})
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Admit(ctx, "s"); err == nil || err.ErrStatus.Code != http.StatusServiceUnavailable || err.ErrStatus.Details == nil ||
			len(err.ErrStatus.Details.Causes) != 1 || err.ErrStatus.Details.Causes[0].Type != homes.ReasonHomeClaiming || err.ErrStatus.Details.Causes[0].Field != "c" {
			t.Fatalf("a claiming s while c is: %v, want 503 HomeClaiming naming c", err)
		}
	})
}

// TestSearchQuestionsAreChecked: a search of no shard, or with a budget that
// is no number of milliseconds, is a 400, and no search.
func TestSearchQuestionsAreChecked(t *testing.T) {
	n := startSearchNet(t, [][2]string{{"a", "b"}})
	for _, q := range []url.Values{
		{kcpcache.SearchParameter: {"x"}, kcpcache.SearchBudgetParameter: {"100"}},
		{"shard": {"s"}, kcpcache.SearchParameter: {"x"}, kcpcache.SearchBudgetParameter: {"soon"}},
		{"shard": {"s"}, kcpcache.SearchParameter: {"x"}, kcpcache.SearchBudgetParameter: {"100"}, kcpcache.SearchClaimantParameter: {"Not A Name"}},
	} {
		resp, err := http.Get(n.urls["a"] + kcpcache.HomesPath + "?" + q.Encode())
		if err != nil {
			t.Fatal(err)
		}
		var st struct {
			Code   int    `json:"code"`
			Reason string `json:"reason"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&st)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || st.Reason != "BadRequest" {
			t.Errorf("%v: %d %+v, want 400 BadRequest", q, resp.StatusCode, st)
		}
	}
	if got := n.asked["b"].Load(); got != 0 {
		t.Errorf("b was asked %d searches, want none", got)
	}
}
