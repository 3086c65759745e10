package mirror

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/klog/v2"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/options"
)

// A shard's home is a claim (shard, home cache, generation), never inferred
// from data or from who wrote: a write that lands at the wrong cache must
// not move a home, or the home's mirrors would treat its objects as copies
// and replace them with the one written elsewhere.
//
//   - A cache holds the claims it made and learns its peers' by polling
//     their tables (kcpcache.HomesPath); both are persisted in its storage,
//     so a restart keeps them, and a cache whose storage was lost gets its
//     own claims back from its peers (a learnt claim naming it).
//   - A write into a shard's partition is accepted only where the highest
//     claim names this cache. With no claim known, the cache asks every
//     peer: only when all answered and none knows a home (nor is claiming
//     the shard itself) does it claim the shard, at generation 1.
//   - A home moves only by --adopt-shard: the new home claims the shard at
//     one more than the highest generation it or a reachable peer knows.
//     The old home, learning the higher claim, gives the shard up.
//   - Two claims of the same generation naming different homes are a
//     conflict: reported, never resolved by deleting data; the operator
//     resolves it with --adopt-shard at the cache that should win.

// The reasons of refusals that come from claims, in Status causes.
const (
	// ReasonHomeConflict: two caches claim the shard at the same generation.
	ReasonHomeConflict = "HomeConflict"
	// ReasonHomeNotPeered: the shard's home is neither this cache nor one
	// of its peers; this cache holds no copy it could vouch for.
	ReasonHomeNotPeered = "HomeNotPeered"
	// ReasonHomeClaiming: a peer is claiming the shard at this moment.
	ReasonHomeClaiming = "HomeClaiming"
)

const (
	defaultPollInterval = 2 * time.Second
	// homesKey is where the claims are persisted, below the etcd prefix.
	homesKey = "/kcp-cache/homes"
)

// HomesKey is the storage key of the claims below the storage prefix.
func HomesKey(prefix string) string { return strings.TrimSuffix(prefix, "/") + homesKey }

// ClaimStore persists a cache's claims.
type ClaimStore interface {
	// Load returns what Save last stored; nil when nothing was.
	Load(ctx context.Context) ([]byte, error)
	Save(ctx context.Context, data []byte) error
}

// HomesConfig is what Homes needs.
type HomesConfig struct {
	CacheName string
	Epoch     func() string
	// Peers are asked for their tables.
	Peers []*Peer
	// Store persists the claims; nil keeps them in memory only.
	Store ClaimStore
	// FreshnessWait (--freshness-wait) bounds asking the peers before a
	// claim, and how long a write of a shard being adopted waits for the
	// claim; zero: options.DefaultFreshnessWait.
	FreshnessWait time.Duration
	// PollInterval is how often the peers' tables are read; zero: two
	// seconds.
	PollInterval time.Duration
	// Adopt are shards this cache takes over (--adopt-shard), once.
	Adopt []string
}

// record is what is persisted.
type record struct {
	Claims []kcpcache.HomeClaim `json:"claims"`
	// Adopted maps a shard --adopt-shard acted on to the generation it
	// claimed: the flag acts once per cache and shard.
	Adopted map[string]int64 `json:"adopted,omitempty"`
}

// Homes is a cache's table of home claims.
type Homes struct {
	cfg   HomesConfig
	peers []*Peer

	mu        sync.Mutex
	claims    map[string]kcpcache.HomeClaim
	conflicts map[string]string
	adopted   map[string]int64
	claiming  map[string]bool
	// onChange is told when a shard's home changes (set by the mirror).
	onChange func(ctx context.Context, shard, from, to string)

	// claimMu lets one claim at a time ask the peers.
	claimMu sync.Mutex
	saveMu  sync.Mutex
	// adoptDone is closed once --adopt-shard has acted.
	adoptDone chan struct{}
	pollNow   chan struct{}
}

// NewHomes builds the table; Load fills it from the store.
func NewHomes(cfg HomesConfig) (*Homes, error) {
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
	h := &Homes{cfg: cfg, claims: map[string]kcpcache.HomeClaim{}, conflicts: map[string]string{},
		adopted: map[string]int64{}, claiming: map[string]bool{}, adoptDone: make(chan struct{}), pollNow: make(chan struct{}, 1)}
	h.peers = append(h.peers, cfg.Peers...)
	sort.Slice(h.peers, func(i, j int) bool { return h.peers[i].Name < h.peers[j].Name })
	return h, nil
}

// Load reads the persisted claims.
func (h *Homes) Load(ctx context.Context) error {
	if h.cfg.Store == nil {
		return nil
	}
	data, err := h.cfg.Store.Load(ctx)
	if err != nil || data == nil {
		return err
	}
	var rec record
	if err := json.Unmarshal(data, &rec); err != nil {
		return fmt.Errorf("reading the persisted home claims: %w", err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range rec.Claims {
		c.Held, c.ConflictsWith = c.Home == h.cfg.CacheName, ""
		h.claims[c.Shard] = c
		homeInfo.WithLabelValues(c.Shard, c.Home).Set(1)
	}
	for s, g := range rec.Adopted {
		h.adopted[s] = g
	}
	return nil
}

// save persists the table.
func (h *Homes) save(ctx context.Context) error {
	if h.cfg.Store == nil {
		return nil
	}
	h.saveMu.Lock()
	defer h.saveMu.Unlock()
	h.mu.Lock()
	rec := record{Adopted: map[string]int64{}}
	for _, c := range h.claims {
		rec.Claims = append(rec.Claims, kcpcache.HomeClaim{Shard: c.Shard, Home: c.Home, Generation: c.Generation})
	}
	for s, g := range h.adopted {
		rec.Adopted[s] = g
	}
	h.mu.Unlock()
	sort.Slice(rec.Claims, func(i, j int) bool { return rec.Claims[i].Shard < rec.Claims[j].Shard })
	data, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	return h.cfg.Store.Save(ctx, data)
}

// Lookup returns the highest claim known for shard, and the home of a
// conflicting claim of the same generation ("" without conflict).
func (h *Homes) Lookup(shard string) (kcpcache.HomeClaim, string, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	c, ok := h.claims[shard]
	return c, h.conflicts[shard], ok
}

// HomedElsewhere returns the home and generation of shard's claim when it
// names another cache, with no conflict.
func (h *Homes) HomedElsewhere(shard string) (string, int64, bool) {
	c, conflict, ok := h.Lookup(shard)
	if !ok || conflict != "" || c.Home == h.cfg.CacheName {
		return "", 0, false
	}
	return c.Home, c.Generation, true
}

// known returns every claim known, and the conflicts.
func (h *Homes) known() ([]kcpcache.HomeClaim, map[string]string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]kcpcache.HomeClaim, 0, len(h.claims))
	for _, c := range h.claims {
		out = append(out, c)
	}
	conflicts := make(map[string]string, len(h.conflicts))
	for s, o := range h.conflicts {
		conflicts[s] = o
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Shard < out[j].Shard })
	return out, conflicts
}

// Table is this cache's answer at kcpcache.HomesPath; shard "" is every
// shard.
func (h *Homes) Table(shard string) kcpcache.HomesAnswer {
	ans := kcpcache.HomesAnswer{Cache: h.cfg.CacheName, Claims: []kcpcache.HomeClaim{}}
	if h.cfg.Epoch != nil {
		ans.Epoch = h.cfg.Epoch()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for s, c := range h.claims {
		if shard != "" && s != shard {
			continue
		}
		c.Held = c.Home == h.cfg.CacheName
		c.ConflictsWith = h.conflicts[s]
		ans.Claims = append(ans.Claims, c)
	}
	for s := range h.claiming {
		if shard == "" || s == shard {
			ans.Claiming = append(ans.Claiming, s)
		}
	}
	sort.Slice(ans.Claims, func(i, j int) bool { return ans.Claims[i].Shard < ans.Claims[j].Shard })
	sort.Strings(ans.Claiming)
	return ans
}

// Handler serves kcpcache.HomesPath.
func (h *Homes) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		if req.Method != http.MethodGet {
			w.Header().Set("Allow", http.MethodGet)
			writeJSONStatus(w, apierrors.NewMethodNotSupported(schema.GroupResource{Resource: "homes"}, req.Method))
			return
		}
		shard := req.URL.Query().Get("shard")
		if shard != "" {
			if err := kcpcache.ValidateShardName(shard); err != nil {
				writeJSONStatus(w, apierrors.NewBadRequest(err.Error()))
				return
			}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(h.Table(shard))
	})
}

func writeJSONStatus(w http.ResponseWriter, err *apierrors.StatusError) {
	status := err.Status()
	status.Kind, status.APIVersion = "Status", "v1"
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(int(status.Code))
	_ = json.NewEncoder(w).Encode(status)
}

// merge learns the claims of a peer's table. It returns whether the table
// changed.
func (h *Homes) merge(ctx context.Context, from string, claims []kcpcache.HomeClaim) bool {
	logger := klog.FromContext(ctx)
	type change struct{ shard, from, to string }
	var changes []change
	changed := false
	h.mu.Lock()
	for _, c := range claims {
		if c.Home == "" || c.Generation <= 0 || kcpcache.ValidateShardName(c.Shard) != nil {
			continue
		}
		known, ok := h.claims[c.Shard]
		switch {
		case !ok || c.Generation > known.Generation:
			if ok && known.Home == h.cfg.CacheName && c.Home != h.cfg.CacheName {
				logger.Info("A shard's home moved away from this cache by a claim of a higher generation: giving it up",
					"shard", c.Shard, "to", c.Home, "generation", c.Generation, "heldGeneration", known.Generation, "learntFrom", from)
			} else if !ok && c.Home == h.cfg.CacheName {
				logger.Info("A peer names this cache the home of a shard it had no claim of (its storage was lost or replaced): taking the claim back",
					"shard", c.Shard, "generation", c.Generation, "learntFrom", from)
			}
			h.claims[c.Shard] = kcpcache.HomeClaim{Shard: c.Shard, Home: c.Home, Generation: c.Generation}
			if _, was := h.conflicts[c.Shard]; was {
				delete(h.conflicts, c.Shard)
				homeConflicts.Set(float64(len(h.conflicts)))
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
			if other != "" && h.conflicts[c.Shard] == "" {
				h.conflicts[c.Shard] = other
				homeConflicts.Set(float64(len(h.conflicts)))
				logger.Error(nil, "Two caches claim the same shard at the same generation: a conflict; writes and consistent reads of it are refused until the operator resolves it with --adopt-shard at the cache that should be its home",
					"shard", c.Shard, "generation", c.Generation, "home", known.Home, "conflictingHome", other, "learntFrom", from)
			}
		}
	}
	notify := h.onChange
	h.mu.Unlock()
	for _, ch := range changes {
		if notify != nil {
			notify(ctx, ch.shard, ch.from, ch.to)
		}
	}
	if changed {
		if err := h.save(ctx); err != nil {
			logger.Error(err, "Persisting the home claims")
		}
	}
	return changed
}

// askTable reads p's table (of shard, or every shard with "").
func askTable(ctx context.Context, p *Peer, shard string) (kcpcache.HomesAnswer, error) {
	var query url.Values
	if shard != "" {
		query = url.Values{"shard": {shard}}
	}
	var ans kcpcache.HomesAnswer
	if err := p.GetJSON(ctx, kcpcache.HomesPath, query, 16<<20, "the homes table", &ans); err != nil {
		return kcpcache.HomesAnswer{}, err
	}
	if ans.Cache != p.Name {
		return kcpcache.HomesAnswer{}, fmt.Errorf("the peer configured as %q answers as cache %q", p.Name, ans.Cache)
	}
	return ans, nil
}

// askPeers asks every peer (or the one named) for its table and learns
// it. It returns the peers that could not answer and those claiming shard.
func (h *Homes) askPeers(ctx context.Context, shard, only string) (failed map[string]error, claiming []string) {
	ctx, cancel := context.WithTimeout(ctx, h.cfg.FreshnessWait)
	defer cancel()
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	failed = map[string]error{}
	for _, p := range h.peers {
		if only != "" && p.Name != only {
			continue
		}
		wg.Go(func() {
			ans, err := askTable(ctx, p, shard)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failed[p.Name] = err
				return
			}
			h.merge(ctx, p.Name, ans.Claims)
			for _, s := range ans.Claiming {
				if shard != "" && s == shard {
					claiming = append(claiming, p.Name)
				}
			}
		})
	}
	wg.Wait()
	sort.Strings(claiming)
	return failed, claiming
}

// learnFromPeer makes sure the claim of shard is known, asking the peer
// that holds the shard's objects when it is not.
func (h *Homes) learnFromPeer(ctx context.Context, peer, shard string) error {
	if _, _, ok := h.Lookup(shard); ok {
		return nil
	}
	failed, _ := h.askPeers(ctx, shard, peer)
	if err := failed[peer]; err != nil {
		return fmt.Errorf("asking peer %q for the home of shard %q: %w", peer, shard, err)
	}
	return nil
}

// Admit decides a write into shard's partition here: nil accepts it.
func (h *Homes) Admit(ctx context.Context, shard string) *apierrors.StatusError {
	if h.isAdopting(shard) {
		select {
		case <-h.adoptDone:
		case <-time.After(h.cfg.FreshnessWait):
			return h.unavailable(shard, fmt.Sprintf("this cache is adopting shard %q and has not claimed it yet", shard), nil)
		case <-ctx.Done():
			return apierrors.NewTimeoutError("the request ended", 1)
		}
	}
	if c, conflict, ok := h.Lookup(shard); ok {
		return h.decide(shard, c, conflict)
	}
	h.claimMu.Lock()
	defer h.claimMu.Unlock()
	if c, conflict, ok := h.Lookup(shard); ok {
		return h.decide(shard, c, conflict)
	}
	h.mu.Lock()
	h.claiming[shard] = true
	h.mu.Unlock()
	// Cleared only once the claim (if any) is in the table: a peer asking
	// meanwhile sees "claiming" or the claim, never nothing.
	defer func() {
		h.mu.Lock()
		delete(h.claiming, shard)
		h.mu.Unlock()
	}()
	failed, claiming := h.askPeers(ctx, shard, "")
	if c, conflict, ok := h.Lookup(shard); ok {
		return h.decide(shard, c, conflict)
	}
	if len(failed) > 0 {
		var causes []metav1.StatusCause
		var names []string
		for name, err := range failed {
			names = append(names, name)
			causes = append(causes, metav1.StatusCause{Type: ReasonHomeUnreachable, Field: name,
				Message: fmt.Sprintf("the peer cache %q did not say whether it knows the home of shard %q: %v", name, shard, err)})
		}
		sort.Strings(names)
		sort.Slice(causes, func(i, j int) bool { return causes[i].Field < causes[j].Field })
		return h.unavailable(shard, fmt.Sprintf("this cache knows no home of shard %q and cannot ask every peer (%s did not answer): the shard may be homed there", shard, strings.Join(names, ", ")), causes)
	}
	if len(claiming) > 0 {
		var causes []metav1.StatusCause
		for _, name := range claiming {
			causes = append(causes, metav1.StatusCause{Type: ReasonHomeClaiming, Field: name, Message: fmt.Sprintf("the peer cache %q is claiming shard %q at this moment", name, shard)})
		}
		return h.unavailable(shard, fmt.Sprintf("peer caches (%s) are claiming shard %q at this moment; retry", strings.Join(claiming, ", "), shard), causes)
	}
	c := kcpcache.HomeClaim{Shard: shard, Home: h.cfg.CacheName, Generation: 1}
	h.mu.Lock()
	h.claims[shard] = c
	h.mu.Unlock()
	if err := h.save(ctx); err != nil {
		h.mu.Lock()
		delete(h.claims, shard)
		h.mu.Unlock()
		return h.unavailable(shard, fmt.Sprintf("persisting the claim of shard %q: %v", shard, err), nil)
	}
	homeInfo.WithLabelValues(shard, h.cfg.CacheName).Set(1)
	klog.FromContext(ctx).Info("Claimed a shard's home: no peer knows another", "shard", shard, "generation", 1)
	return nil
}

func (h *Homes) decide(shard string, c kcpcache.HomeClaim, conflict string) *apierrors.StatusError {
	if conflict != "" {
		return h.unavailable(shard, conflictMessage(shard, c, conflict), []metav1.StatusCause{{Type: ReasonHomeConflict, Field: shard, Message: conflictMessage(shard, c, conflict)}})
	}
	if c.Home == h.cfg.CacheName {
		return nil
	}
	return apierrors.NewForbidden(schema.GroupResource{}, "", fmt.Errorf("the home of shard %q is the cache %q (claim generation %d): the shard writes there, and this cache mirrors it", shard, c.Home, c.Generation))
}

func conflictMessage(shard string, c kcpcache.HomeClaim, other string) string {
	return fmt.Sprintf("the caches %q and %q both claim shard %q at generation %d; resolve with --adopt-shard=%s at the cache that should be its home", c.Home, other, shard, c.Generation, shard)
}

func (h *Homes) unavailable(shard, msg string, causes []metav1.StatusCause) *apierrors.StatusError {
	err := apierrors.NewServiceUnavailable(msg)
	err.ErrStatus.Details = &metav1.StatusDetails{Name: shard, Causes: causes, RetryAfterSeconds: 1}
	return err
}

func (h *Homes) isAdopting(shard string) bool {
	select {
	case <-h.adoptDone:
		return false
	default:
	}
	for _, s := range h.cfg.Adopt {
		if s == shard {
			return true
		}
	}
	return false
}

// Run adopts the shards of --adopt-shard once, then polls the peers'
// tables until ctx ends.
func (h *Homes) Run(ctx context.Context) {
	logger := klog.FromContext(ctx).WithName("homes")
	ctx = klog.NewContext(ctx, logger)
	h.askPeers(ctx, "", "")
	h.adopt(ctx)
	close(h.adoptDone)
	ticker := time.NewTicker(h.cfg.PollInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		case <-h.pollNow:
		}
		if failed, _ := h.askPeers(ctx, "", ""); len(failed) > 0 {
			for name, err := range failed {
				logger.V(2).Info("Could not read a peer's home claims", "peer", name, "err", err)
			}
		}
	}
}

// adoptedHere returns, once --adopt-shard has acted (or ctx ended), the
// shards this cache adopted whose claim it still holds.
func (h *Homes) adoptedHere(ctx context.Context) []string {
	select {
	case <-h.adoptDone:
	case <-ctx.Done():
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for shard := range h.adopted {
		if h.claims[shard].Home == h.cfg.CacheName {
			out = append(out, shard)
		}
	}
	sort.Strings(out)
	return out
}

// RequestPoll makes Run read the peers' tables now.
func (h *Homes) RequestPoll() {
	select {
	case h.pollNow <- struct{}{}:
	default:
	}
}

// adopt claims the shards of --adopt-shard that it has not acted on yet.
func (h *Homes) adopt(ctx context.Context) {
	logger := klog.FromContext(ctx)
	for _, shard := range h.cfg.Adopt {
		h.mu.Lock()
		gen, done := h.adopted[shard]
		var c kcpcache.HomeClaim
		if !done {
			c = kcpcache.HomeClaim{Shard: shard, Home: h.cfg.CacheName, Generation: h.claims[shard].Generation + 1}
			old := h.claims[shard]
			h.claims[shard] = c
			h.adopted[shard] = c.Generation
			delete(h.conflicts, shard)
			homeConflicts.Set(float64(len(h.conflicts)))
			if old.Home != "" {
				homeInfo.DeleteLabelValues(shard, old.Home)
			}
			homeInfo.WithLabelValues(shard, h.cfg.CacheName).Set(1)
		}
		h.mu.Unlock()
		if done {
			logger.Info("--adopt-shard acted before on this cache; not adopting again", "shard", shard, "generation", gen)
			continue
		}
		if err := h.save(ctx); err != nil {
			logger.Error(err, "Persisting an adopted shard's claim", "shard", shard)
		}
		logger.Info("Adopted a shard: this cache is its home", "shard", shard, "generation", c.Generation)
	}
}
