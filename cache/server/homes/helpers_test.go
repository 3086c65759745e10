package homes_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/server/homes"
)

// peerSpec is how a fake peer answers at kcpcache.HomesPath.
type peerSpec struct {
	// claims and claiming are its table (whatever shard is asked: the
	// asker filters).
	claims   []kcpcache.HomeClaim
	claiming []string
	// tables, when set, are its claims at its first, second, ... answer
	// (the last one after that).
	tables [][]kcpcache.HomeClaim
	// status, when set, is its answer's status, with no table.
	status int
	// hang: it answers nothing until the asker gives up.
	hang bool
	// down: nothing listens at its address.
	down bool
	// as is the cache it answers as; its own name when empty.
	as string
	// routes, when set, are the routes it offers at its first, second, ...
	// answer (the last one after that); its own route always.
	routes [][]kcpcache.Route
}

// startPeer serves a fake peer named name as spec says, until the test ends.
func startPeer(t *testing.T, name string, spec peerSpec) *homes.Peer {
	t.Helper()
	var asked atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != kcpcache.HomesPath {
			http.NotFound(w, r)
			return
		}
		n := asked.Add(1)
		switch {
		case spec.hang:
			<-r.Context().Done()
			return
		case spec.status != 0:
			http.Error(w, "refused by the fake", spec.status)
			return
		}
		ans := kcpcache.HomesAnswer{Cache: name, Epoch: "e-" + name, Claims: spec.claims, Claiming: spec.claiming}
		if spec.as != "" {
			ans.Cache = spec.as
		}
		if len(spec.tables) > 0 {
			ans.Claims = spec.tables[min(int(n), len(spec.tables))-1]
		}
		ans.Routes = []kcpcache.Route{{Home: name, Path: []string{name}}}
		if len(spec.routes) > 0 {
			ans.Routes = append(ans.Routes, spec.routes[min(int(n), len(spec.routes))-1]...)
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(ans)
	}))
	if spec.down {
		srv.Close()
	} else {
		t.Cleanup(srv.Close)
	}
	p, err := homes.NewPeer(name, &rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// memStore keeps the persisted claims in memory.
type memStore struct {
	mu   sync.Mutex
	data []byte
	// err fails every Save.
	err error
}

func (s *memStore) Load(context.Context) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.data, nil
}

func (s *memStore) Save(_ context.Context, data []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	s.data = append([]byte(nil), data...)
	return nil
}

// tableConfig is what a test's table is built from: the cache is "east".
type tableConfig struct {
	// persisted is what the store holds at start (the persisted form);
	// "" for nothing.
	persisted string
	peers     map[string]peerSpec
	adopt     []string
	saveErr   error
	wait      time.Duration
}

// newTable builds and loads east's table.
func newTable(t *testing.T, c tableConfig) (*homes.Table, *memStore) {
	t.Helper()
	store := &memStore{err: c.saveErr}
	if c.persisted != "" {
		store.data = []byte(c.persisted)
	}
	cfg := homes.Config{CacheName: "east", Epoch: func() string { return "e-east" }, Store: store, FreshnessWait: c.wait, Adopt: c.adopt, PollInterval: time.Hour}
	if cfg.FreshnessWait == 0 {
		cfg.FreshnessWait = 5 * time.Second
	}
	for name, spec := range c.peers {
		cfg.Peers = append(cfg.Peers, startPeer(t, name, spec))
	}
	table, err := homes.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := table.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	return table, store
}

// claimOf is shard's claim as "home/generation", "" when none is known.
func claimOf(t *homes.Table, shard string) string {
	c, _, ok := t.Lookup(shard)
	if !ok {
		return ""
	}
	return c.Home + "/" + strconv.FormatInt(c.Generation, 10)
}
