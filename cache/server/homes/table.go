package homes

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"k8s.io/klog/v2"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/options"
)

const (
	defaultPollInterval = 2 * time.Second
	// homesKey is where the claims are persisted, below the etcd prefix.
	homesKey = "/kcp-cache/homes"
)

// StorageKey is the storage key of the claims below the storage prefix.
func StorageKey(prefix string) string { return strings.TrimSuffix(prefix, "/") + homesKey }

// Store persists a cache's claims.
type Store interface {
	// Load returns what Save last stored; nil when nothing was.
	Load(ctx context.Context) ([]byte, error)
	Save(ctx context.Context, data []byte) error
}

// Config is what a Table needs.
type Config struct {
	// CacheName is this cache's name (--cache-name); Epoch its current
	// epoch, sent with its answer.
	CacheName string
	Epoch     func() string
	// Peers are asked for their tables.
	Peers []*Peer
	// Store persists the claims; nil keeps them in memory only.
	Store Store
	// FreshnessWait (--freshness-wait) bounds asking the peers before a
	// claim, and how long a write of a shard being adopted waits for the
	// claim; zero: options.DefaultFreshnessWait.
	FreshnessWait time.Duration
	// PollInterval is how often the peers' tables are read; zero: two
	// seconds.
	PollInterval time.Duration
	// Adopt are shards this cache takes over (--adopt-shard), once.
	Adopt []string
	// PassOn are, per peer, the only resources this cache passes on to it
	// (--pass-on; routes.go).
	PassOn map[string][]string
}

// record is what is persisted.
type record struct {
	Claims []kcpcache.HomeClaim `json:"claims"`
	// Adopted maps a shard --adopt-shard acted on to the generation it
	// claimed: the flag acts once per cache and shard.
	Adopted map[string]int64 `json:"adopted,omitempty"`
}

// Table is a cache's table of home claims.
type Table struct {
	cfg   Config
	peers []*Peer

	mu        sync.Mutex
	claims    map[string]kcpcache.HomeClaim
	conflicts map[string]string
	adopted   map[string]int64
	claiming  map[string]bool
	// seen are the searches this cache was asked, when; pending the shards
	// other caches were claiming when their search reached it, each with
	// the claimant (search.go).
	seen    map[string]time.Time
	pending map[string]string
	// onChange is told when a shard's home changes (OnHomeChange).
	onChange func(ctx context.Context, shard, from, to string)
	// offers are the routes each peer's latest table offered, upstreams
	// the peer each home's partitions are taken from (routes.go); onRoute
	// is told when one changes, routeEpoch reads a home's epoch as this
	// cache's copies are.
	offers    map[string]offered
	upstreams map[string]upstream
	// routeGen counts the changes of an upstream's peer (Upstream).
	routeGen   uint64
	onRoute    func(ctx context.Context, home, from, to string)
	routeEpoch func(home string) string

	// claimMu lets one claim at a time ask the peers.
	claimMu sync.Mutex
	saveMu  sync.Mutex
	// adoptDone is closed once --adopt-shard has acted.
	adoptDone chan struct{}
	pollNow   chan struct{}
}

// New builds the table; Load fills it from the store.
func New(cfg Config) (*Table, error) {
	registerMetrics()
	if err := kcpcache.ValidateCacheName(cfg.CacheName); err != nil {
		return nil, err
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = defaultPollInterval
	}
	if cfg.FreshnessWait <= 0 {
		cfg.FreshnessWait = options.DefaultFreshnessWait
	}
	t := &Table{cfg: cfg, claims: map[string]kcpcache.HomeClaim{}, conflicts: map[string]string{},
		adopted: map[string]int64{}, claiming: map[string]bool{}, seen: map[string]time.Time{}, pending: map[string]string{}, offers: map[string]offered{}, upstreams: map[string]upstream{}, adoptDone: make(chan struct{}), pollNow: make(chan struct{}, 1)}
	t.peers = append(t.peers, cfg.Peers...)
	sort.Slice(t.peers, func(i, j int) bool { return t.peers[i].Name < t.peers[j].Name })
	return t, nil
}

// OnHomeChange makes the table tell f when it learns that a shard's home
// changed, from "" for a shard it had no claim of (the mirror follows a
// shard to its new home).
func (t *Table) OnHomeChange(f func(ctx context.Context, shard, from, to string)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.onChange = f
}

// Load reads the persisted claims.
func (t *Table) Load(ctx context.Context) error {
	if t.cfg.Store == nil {
		return nil
	}
	data, err := t.cfg.Store.Load(ctx)
	if err != nil || data == nil {
		return err
	}
	var rec record
	if err := json.Unmarshal(data, &rec); err != nil {
		return fmt.Errorf("reading the persisted home claims: %w", err)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, c := range rec.Claims {
		c.Held, c.ConflictsWith = c.Home == t.cfg.CacheName, ""
		t.claims[c.Shard] = c
		homeInfo.WithLabelValues(c.Shard, c.Home).Set(1)
	}
	for s, g := range rec.Adopted {
		t.adopted[s] = g
	}
	return nil
}

// save persists the table.
func (t *Table) save(ctx context.Context) error {
	if t.cfg.Store == nil {
		return nil
	}
	t.saveMu.Lock()
	defer t.saveMu.Unlock()
	t.mu.Lock()
	rec := record{Adopted: map[string]int64{}}
	for _, c := range t.claims {
		rec.Claims = append(rec.Claims, kcpcache.HomeClaim{Shard: c.Shard, Home: c.Home, Generation: c.Generation})
	}
	for s, g := range t.adopted {
		rec.Adopted[s] = g
	}
	t.mu.Unlock()
	sort.Slice(rec.Claims, func(i, j int) bool { return rec.Claims[i].Shard < rec.Claims[j].Shard })
	data, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	return t.cfg.Store.Save(ctx, data)
}

// Lookup returns the highest claim known for shard, and the home of a
// conflicting claim of the same generation ("" without conflict).
func (t *Table) Lookup(shard string) (kcpcache.HomeClaim, string, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	c, ok := t.claims[shard]
	return c, t.conflicts[shard], ok
}

// HomedElsewhere returns the home and generation of shard's claim when it
// names another cache, with no conflict.
func (t *Table) HomedElsewhere(shard string) (string, int64, bool) {
	c, conflict, ok := t.Lookup(shard)
	if !ok || conflict != "" || c.Home == t.cfg.CacheName {
		return "", 0, false
	}
	return c.Home, c.Generation, true
}

// Known returns every claim known, and the conflicts.
func (t *Table) Known() ([]kcpcache.HomeClaim, map[string]string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]kcpcache.HomeClaim, 0, len(t.claims))
	for _, c := range t.claims {
		out = append(out, c)
	}
	conflicts := make(map[string]string, len(t.conflicts))
	for s, o := range t.conflicts {
		conflicts[s] = o
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Shard < out[j].Shard })
	return out, conflicts
}

// Answer is this cache's answer at kcpcache.HomesPath to a reader that is
// not a peer; shard "" is every shard.
func (t *Table) Answer(shard string) kcpcache.HomesAnswer { return t.AnswerFor(shard, "") }

// AnswerFor is this cache's answer at kcpcache.HomesPath to the peer asker
// ("" for another reader). The routes are every home's, whatever the
// shard, with what this cache passes on to the asker.
func (t *Table) AnswerFor(shard, asker string) kcpcache.HomesAnswer {
	ans := kcpcache.HomesAnswer{Cache: t.cfg.CacheName, Claims: []kcpcache.HomeClaim{}}
	if t.cfg.Epoch != nil {
		ans.Epoch = t.cfg.Epoch()
	}
	t.mu.Lock()
	for s, c := range t.claims {
		if shard != "" && s != shard {
			continue
		}
		c.Held = c.Home == t.cfg.CacheName
		c.ConflictsWith = t.conflicts[s]
		ans.Claims = append(ans.Claims, c)
	}
	for s := range t.claiming {
		if shard == "" || s == shard {
			ans.Claiming = append(ans.Claiming, s)
		}
	}
	t.mu.Unlock()
	sort.Slice(ans.Claims, func(i, j int) bool { return ans.Claims[i].Shard < ans.Claims[j].Shard })
	sort.Strings(ans.Claiming)
	ans.Routes = t.offeredRoutes(asker)
	ans.PassedOn = t.cfg.PassOn[asker]
	return ans
}

// merge learns the claims of a peer's table. It returns whether the table
// changed.
func (t *Table) merge(ctx context.Context, from string, claims []kcpcache.HomeClaim) bool {
	logger := klog.FromContext(ctx)
	type change struct{ shard, from, to string }
	var changes []change
	changed := false
	t.mu.Lock()
	for _, c := range claims {
		if c.Home == "" || c.Generation <= 0 || kcpcache.ValidateShardName(c.Shard) != nil {
			continue
		}
		known, ok := t.claims[c.Shard]
		switch {
		case !ok || c.Generation > known.Generation:
			if ok && known.Home == t.cfg.CacheName && c.Home != t.cfg.CacheName {
				logger.Info("A shard's home moved away from this cache by a claim of a higher generation: giving it up",
					"shard", c.Shard, "to", c.Home, "generation", c.Generation, "heldGeneration", known.Generation, "learntFrom", from)
			} else if !ok && c.Home == t.cfg.CacheName {
				logger.Info("A peer names this cache the home of a shard it had no claim of (its storage was lost or replaced): taking the claim back",
					"shard", c.Shard, "generation", c.Generation, "learntFrom", from)
			}
			t.claims[c.Shard] = kcpcache.HomeClaim{Shard: c.Shard, Home: c.Home, Generation: c.Generation}
			if _, was := t.conflicts[c.Shard]; was {
				delete(t.conflicts, c.Shard)
				homeConflicts.Set(float64(len(t.conflicts)))
			}
			if ok {
				homeInfo.DeleteLabelValues(c.Shard, known.Home)
			}
			homeInfo.WithLabelValues(c.Shard, c.Home).Set(1)
			changed = true
			if !ok || known.Home != c.Home {
				changes = append(changes, change{c.Shard, known.Home, c.Home})
			}
		case c.Generation == known.Generation:
			other := ""
			if c.Home != known.Home {
				other = c.Home
			} else if c.ConflictsWith != "" && c.ConflictsWith != known.Home {
				other = c.ConflictsWith
			}
			if other != "" && t.conflicts[c.Shard] == "" {
				t.conflicts[c.Shard] = other
				homeConflicts.Set(float64(len(t.conflicts)))
				logger.Error(nil, "Two caches claim the same shard at the same generation: a conflict; writes and consistent reads of it are refused until the operator resolves it with --adopt-shard at the cache that should be its home",
					"shard", c.Shard, "generation", c.Generation, "home", known.Home, "conflictingHome", other, "learntFrom", from)
			}
		}
	}
	notify := t.onChange
	t.mu.Unlock()
	for _, ch := range changes {
		if notify != nil {
			notify(ctx, ch.shard, ch.from, ch.to)
		}
	}
	if changed {
		if err := t.save(ctx); err != nil {
			logger.Error(err, "Persisting the home claims")
		}
	}
	return changed
}
