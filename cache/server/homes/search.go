package homes

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

// A search asks every cache of the hierarchy about one shard's claim
// (kcpcache.SearchParameter). Reading the peers' tables alone is enough in
// a full mesh, where the home of any shard is a peer; beyond a relay it is
// not: a cache learns a new shard's claim a poll (2 s) a hop after the home
// claimed it, and until then a consistent read there would be confirmed
// with caches that do not hold the shard yet (a read at r2, two relays from
// the home, answered 404 for an object created 8 ms before), and two caches
// that do not peer could both claim a new shard. So a claim, and a
// consistent read of a shard whose claim is unknown, search.
//
// Why the answer can be trusted: every cache forwards the first arrival of
// a search to all its peers, and a cache's answer holds the whole answers
// of the caches it reached, or names the ones it could not. When every
// cache named unreached somewhere was reached by another path, the caches
// reached are closed under "is a peer of": the first arrivals form a tree
// from the asker, a lost answer leaves its cache unreached at its parent,
// and a duplicate answer names a cache reached first on another path. A
// search that reached every cache and found no claim and nobody claiming
// proves that no cache reachable along --peer holds a claim of the shard.

const (
	// seenLifetime is how long a cache remembers a search it was asked:
	// longer than any budget.
	seenLifetime = time.Minute
	// maxPending bounds the shards remembered as being claimed elsewhere.
	maxPending = 10000
)

// SearchOutcome is what a search found, besides the claim it learnt (the
// table has it).
type SearchOutcome struct {
	// Claiming are the caches claiming the shard at the moment they were
	// asked.
	Claiming []string
	// Unreached are the caches that no path reached.
	Unreached []kcpcache.SearchUnreached
}

// searchResult gathers the answers of a search's branches.
type searchResult struct {
	mu        sync.Mutex
	reached   map[string]bool
	unreached map[string]kcpcache.SearchUnreached
	claiming  map[string]bool
}

func newSearchResult() *searchResult {
	return &searchResult{reached: map[string]bool{}, unreached: map[string]kcpcache.SearchUnreached{}, claiming: map[string]bool{}}
}

func (r *searchResult) answer() *kcpcache.SearchAnswer {
	out := &kcpcache.SearchAnswer{}
	for c := range r.reached {
		out.Reached = append(out.Reached, c)
	}
	for c := range r.claiming {
		out.Claiming = append(out.Claiming, c)
	}
	for _, u := range r.unreached {
		out.Unreached = append(out.Unreached, u)
	}
	sort.Strings(out.Reached)
	sort.Strings(out.Claiming)
	sort.Slice(out.Unreached, func(i, j int) bool { return out.Unreached[i].Cache < out.Unreached[j].Cache })
	return out
}

// outcome is what the asker concludes: the caches named unreached that no
// other path reached.
func (r *searchResult) outcome() SearchOutcome {
	a := r.answer()
	o := SearchOutcome{Claiming: a.Claiming}
	for _, u := range a.Unreached {
		if !r.reached[u.Cache] {
			o.Unreached = append(o.Unreached, u)
		}
	}
	return o
}

// Search asks every cache reachable along the peers whether it knows
// shard's claim or is claiming it, within the freshness wait, and learns
// the claim found. claim says this cache is about to claim the shard (the
// caches reached remember it; see PendingShards).
func (t *Table) Search(ctx context.Context, shard string, claim bool) SearchOutcome {
	id := newSearchID()
	t.markSeen(id)
	claimant := ""
	if claim {
		claimant = t.cfg.CacheName
	}
	res := newSearchResult()
	res.reached[t.cfg.CacheName] = true
	t.forwardSearch(ctx, res, id, shard, claimant, t.cfg.FreshnessWait, "")
	o := res.outcome()
	_, _, found := t.Lookup(shard)
	switch {
	case found:
		searches.WithLabelValues("found").Inc()
	case len(o.Unreached) > 0:
		searches.WithLabelValues("unreached").Inc()
	case len(o.Claiming) > 0:
		searches.WithLabelValues("claiming").Inc()
	default:
		searches.WithLabelValues("none").Inc()
	}
	return o
}

// answerSearch answers a search asked by asker ("" for a reader that is not
// a peer) within budget.
func (t *Table) answerSearch(ctx context.Context, shard, id, claimant, asker string, budget time.Duration) kcpcache.HomesAnswer {
	ans := t.AnswerFor(shard, asker)
	self := t.cfg.CacheName
	if !t.markSeen(id) {
		ans.Claims, ans.Claiming = []kcpcache.HomeClaim{}, nil
		ans.Search = &kcpcache.SearchAnswer{Duplicate: true}
		return ans
	}
	if claimant != "" && claimant != self {
		t.notePending(shard, claimant)
	}
	res := newSearchResult()
	res.reached[self] = true
	_, _, known := t.Lookup(shard)
	switch {
	case known:
	case slices.Contains(ans.Claiming, shard):
		res.claiming[self] = true
	default:
		t.forwardSearch(ctx, res, id, shard, claimant, budget, asker)
		ans = t.AnswerFor(shard, asker)
	}
	ans.Search = res.answer()
	return ans
}

// forwardSearch asks every peer but except the search, each within a share
// of budget that leaves time for its answer to come back, and gathers what
// they say into res, learning the claims they found.
func (t *Table) forwardSearch(ctx context.Context, res *searchResult, id, shard, claimant string, budget time.Duration, except string) {
	hop := budget*8/10 - 20*time.Millisecond
	var wg sync.WaitGroup
	for _, p := range t.peers {
		if p.Name == except {
			continue
		}
		if hop < 50*time.Millisecond {
			res.mu.Lock()
			res.unreached[p.Name] = kcpcache.SearchUnreached{Cache: p.Name, Via: t.cfg.CacheName, Message: "no time was left to ask it"}
			res.mu.Unlock()
			continue
		}
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(ctx, hop)
			defer cancel()
			q := url.Values{"shard": {shard}, kcpcache.SearchParameter: {id}, kcpcache.SearchBudgetParameter: {strconv.FormatInt(hop.Milliseconds(), 10)}}
			if claimant != "" {
				q.Set(kcpcache.SearchClaimantParameter, claimant)
			}
			var ans kcpcache.HomesAnswer
			err := p.GetJSON(ctx, kcpcache.HomesPath, q, 16<<20, "the search answer", &ans)
			if err == nil && ans.Cache != p.Name {
				err = fmt.Errorf("the peer configured as %q answers as cache %q", p.Name, ans.Cache)
			}
			if err != nil {
				res.mu.Lock()
				if _, first := res.unreached[p.Name]; !first {
					res.unreached[p.Name] = kcpcache.SearchUnreached{Cache: p.Name, Via: t.cfg.CacheName, Message: err.Error()}
				}
				res.mu.Unlock()
				return
			}
			t.merge(ctx, p.Name, ans.Claims)
			res.mu.Lock()
			defer res.mu.Unlock()
			if ans.Search == nil {
				// A cache that does not search (an older version)
				// answers its own table: it counts as reached, as a
				// peer did before searches.
				res.reached[p.Name] = true
				if slices.Contains(ans.Claiming, shard) {
					res.claiming[p.Name] = true
				}
				return
			}
			for _, c := range ans.Search.Reached {
				res.reached[c] = true
			}
			for _, c := range ans.Search.Claiming {
				res.claiming[c] = true
			}
			for _, u := range ans.Search.Unreached {
				if _, first := res.unreached[u.Cache]; !first {
					res.unreached[u.Cache] = u
				}
			}
		})
	}
	wg.Wait()
}

// markSeen records the search id, and reports whether it is the first time.
func (t *Table) markSeen(id string) bool {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	for s, at := range t.seen {
		if now.Sub(at) > seenLifetime {
			delete(t.seen, s)
		}
	}
	if _, ok := t.seen[id]; ok {
		return false
	}
	t.seen[id] = now
	return true
}

// notePending remembers that claimant is claiming shard, whose claim this
// cache does not know.
func (t *Table) notePending(shard, claimant string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.claims[shard]; ok {
		return
	}
	if _, ok := t.pending[shard]; !ok && len(t.pending) >= maxPending {
		return
	}
	t.pending[shard] = claimant
	pendingShards.Set(float64(len(t.pending)))
}

// PendingShards returns the shards another cache was claiming when its
// search reached this one and whose claim this cache has not learnt since,
// each with the claimant. A consistent read of every shard must ask about
// them (ResolvePending): the claim may have been made, and writes of the
// shard acknowledged, before this cache's peers learnt it.
func (t *Table) PendingShards() map[string]string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := map[string]string{}
	for s, c := range t.pending {
		if _, known := t.claims[s]; known {
			delete(t.pending, s)
			continue
		}
		out[s] = c
	}
	pendingShards.Set(float64(len(t.pending)))
	return out
}

// ResolvePending searches for the claim of a pending shard. It returns the
// caches no path reached when the claim is still unknown (the shard may
// have been claimed there); the shard stops being pending once its claim
// is known, or once every cache answered and none is claiming it (the
// claim was not made).
func (t *Table) ResolvePending(ctx context.Context, shard string) []kcpcache.SearchUnreached {
	o := t.Search(ctx, shard, false)
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, known := t.claims[shard]; known || len(o.Unreached) == 0 && len(o.Claiming) == 0 {
		delete(t.pending, shard)
		pendingShards.Set(float64(len(t.pending)))
		return nil
	}
	return o.Unreached
}

func newSearchID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// searchBudget reads a search's budget, at most the freshness wait.
func (t *Table) searchBudget(v string) (time.Duration, error) {
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil || ms <= 0 {
		return 0, fmt.Errorf("%s must be a positive number of milliseconds, not %q", kcpcache.SearchBudgetParameter, v)
	}
	return min(time.Duration(ms)*time.Millisecond, t.cfg.FreshnessWait), nil
}
