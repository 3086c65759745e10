package homes

import (
	"context"
	"fmt"
	"net/url"
	"sort"
	"sync"
	"time"

	"k8s.io/klog/v2"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

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

// AskPeers reads every peer's table (of shard, or every shard with "")
// and learns it, within the freshness wait; a peer that does not answer
// is left out.
func (t *Table) AskPeers(ctx context.Context, shard string) {
	t.askPeers(ctx, shard, "")
}

// AskPeer reads the table of the peer named (of shard, or every shard
// with "") and learns it, within the freshness wait; it returns why the
// peer did not answer.
func (t *Table) AskPeer(ctx context.Context, peer, shard string) error {
	failed, _ := t.askPeers(ctx, shard, peer)
	return failed[peer]
}

// askPeers asks every peer (or the one named) for its table and learns
// it. It returns the peers that could not answer and those claiming shard.
func (t *Table) askPeers(ctx context.Context, shard, only string) (failed map[string]error, claiming []string) {
	ctx, cancel := context.WithTimeout(ctx, t.cfg.FreshnessWait)
	defer cancel()
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	failed = map[string]error{}
	for _, p := range t.peers {
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
			t.merge(ctx, p.Name, ans.Claims)
			t.learnRoutes(p.Name, ans.Routes, ans.PassedOn)
			for _, s := range ans.Claiming {
				if shard != "" && s == shard {
					claiming = append(claiming, p.Name)
				}
			}
		})
	}
	wg.Wait()
	t.chooseRoutes(ctx)
	sort.Strings(claiming)
	return failed, claiming
}

// LearnFromPeer makes sure the claim of shard is known, asking the peer
// that holds the shard's objects when it is not.
func (t *Table) LearnFromPeer(ctx context.Context, peer, shard string) error {
	if _, _, ok := t.Lookup(shard); ok {
		return nil
	}
	if err := t.AskPeer(ctx, peer, shard); err != nil {
		return fmt.Errorf("asking peer %q for the home of shard %q: %w", peer, shard, err)
	}
	return nil
}

// Run adopts the shards of --adopt-shard once, then polls the peers'
// tables until ctx ends.
func (t *Table) Run(ctx context.Context) {
	logger := klog.FromContext(ctx).WithName("homes")
	ctx = klog.NewContext(ctx, logger)
	t.askPeers(ctx, "", "")
	t.adopt(ctx)
	close(t.adoptDone)
	ticker := time.NewTicker(t.cfg.PollInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		case <-t.pollNow:
		}
		// askPeers chooses the routes again, so that offers that aged
		// out (a peer that did not answer) stop counting.
		failed, _ := t.askPeers(ctx, "", "")
		if len(failed) > 0 {
			for name, err := range failed {
				logger.V(2).Info("Could not read a peer's home claims", "peer", name, "err", err)
			}
		}
	}
}

// RequestPoll makes Run read the peers' tables now.
func (t *Table) RequestPoll() {
	select {
	case t.pollNow <- struct{}{}:
	default:
	}
}
