package robustness

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
	"github.com/kcp-cache/kcp-cache/cache/server/homes"
)

// freshnessWait is the caches' --freshness-wait in the regions shape
// (cachetest.StartRegions): how long a mirror waits for its home's
// revision before it refuses a consistent read.
const freshnessWait = 3 * time.Second

// pausedHome is a home cache in a child process, paused by its fault, and
// the mirrors that read its shard.
type pausedHome struct {
	home  *cachetest.Region
	shard string
	// mirrors are proxies in front of the other caches, for the fault's
	// probes (a seeded fault there is seen by them), by cache name.
	mirrors map[string]*Proxy
	found   func(Violation)
	long    bool
}

// homeProbe reads the shard's partition at a mirror through its proxy,
// consistently or with resourceVersion=0, and times the answer.
func (h *pausedHome) probe(ctx context.Context, mirror *Proxy, stale bool) (memberProbe, time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, 2*requestTimeout)
	defer cancel()
	u := mirror.URL + kcpcache.ScopedPathPrefix(kcpcache.Scope{Shard: h.shard, Cluster: "root"}) + "/apis/" + Resource.Group + "/" + Resource.Version + "/" + Resource.Resource
	if stale {
		u += "?resourceVersion=0"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return memberProbe{err: err}, 0
	}
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return memberProbe{err: err}, time.Since(start)
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxStatusBytes))
	took := time.Since(start)
	p := memberProbe{code: resp.StatusCode, age: resp.Header.Get(kcpcache.FreshnessAgeHeader), homeRevision: resp.Header.Get(kcpcache.HomeRevisionHeader)}
	if resp.StatusCode != http.StatusOK {
		p.message = string(body)
	}
	return p, took
}

// ageOf is the home's age in a Kcp-Cache-Freshness-Age header.
func (h *pausedHome) ageOf(header string) (time.Duration, bool) {
	for _, part := range strings.Split(header, ",") {
		name, secs, ok := strings.Cut(strings.TrimSpace(part), "=")
		if ok && name == h.home.Name {
			return headerAge(name + "=" + secs)
		}
	}
	return 0, false
}

// pauseOfHome pauses the home with SIGSTOP and continues it. Paused, it
// keeps its connections open and answers nothing. Meanwhile each mirror
// must refuse a consistent read of the home's shard with 503
// HomeUnreachable within the freshness wait (and a little more for a
// loaded machine), and answer a stale read with the copy and an age that
// grows; once continued, confirm consistent reads again. The histories
// check the rest: nothing acknowledged lost, stale reads exactly the
// home's state at the revision they name, and no younger than the writes
// they miss.
func (h *pausedHome) pauseOfHome() fault {
	return func(runCtx context.Context, _ *testing.T, note func(string)) {
		// A fault begun is carried through, and its checks with it, even
		// when the traffic ends meanwhile.
		ctx := context.WithoutCancel(runCtx)
		length := 2 * freshnessWait
		if h.long {
			// Longer than the clients' own timeout: the shard's
			// writes at its home end while it is paused.
			length = requestTimeout + 2*time.Second
		}
		// Every mirror confirms a consistent read before the pause (and
		// its proxy has seen the answer).
		for name, mirror := range h.mirrors {
			if err := waitFor(ctx, 30*time.Second, func(ctx context.Context) error {
				if p, _ := h.probe(ctx, mirror, false); p.err != nil || p.code != http.StatusOK {
					return fmt.Errorf("a consistent read of %s at %s answered %s", h.shard, name, p)
				}
				return nil
			}); err != nil {
				note(fmt.Sprintf("pause of %s skipped: %v", h.home.Name, err))
				return
			}
		}
		note(fmt.Sprintf("SIGSTOP of %s (the home of %s) for %s", h.home.Name, h.shard, length))
		if err := h.home.Proc.Pause(); err != nil {
			h.found(Violation{Check: "pause", Details: err.Error()})
			return
		}
		paused := time.Now()
		// At every mirror at once (the pause lasts as long as its
		// checks at one mirror): a consistent read sent once the home is
		// paused waits for the home's revision at most the freshness
		// wait; stale reads keep answering, with the home's age, which
		// grows.
		const slack = 2 * time.Second
		var wg sync.WaitGroup
		for name, mirror := range h.mirrors {
			wg.Go(func() {
				p, took := h.probe(ctx, mirror, false)
				if p.err != nil || p.code != http.StatusServiceUnavailable || !strings.Contains(p.message, homes.ReasonHomeUnreachable) || took > freshnessWait+slack {
					// The home's process state (T: stopped) says whether
					// the mirror answered without it.
					h.found(Violation{Check: "paused-home-consistent", Details: fmt.Sprintf("a consistent read of %s at %s while %s was paused (%s after SIGSTOP, process state %s) answered after %s: %s; want 503 %s within %s", h.shard, name, h.home.Name, time.Since(paused).Round(time.Millisecond), h.home.Proc.State(), took.Round(time.Millisecond), p, homes.ReasonHomeUnreachable, freshnessWait+slack)})
				}
				first, _ := h.probe(ctx, mirror, true)
				age1, ok1 := h.ageOf(first.age)
				hold(time.Second)
				second, _ := h.probe(ctx, mirror, true)
				age2, ok2 := h.ageOf(second.age)
				if first.err != nil || second.err != nil || first.code != http.StatusOK || second.code != http.StatusOK || !ok1 || !ok2 || age2 <= age1 {
					h.found(Violation{Check: "paused-home-stale", Details: fmt.Sprintf("two stale reads of %s at %s a second apart while %s was paused answered %s, then %s; want 200 both, with %s's age growing", h.shard, name, h.home.Name, first, second, h.home.Name)})
				}
			})
		}
		wg.Wait()
		hold(length - time.Since(paused))
		if err := h.home.Proc.Continue(); err != nil {
			h.found(Violation{Check: "pause", Details: err.Error()})
			return
		}
		note(fmt.Sprintf("SIGCONT of %s after %s", h.home.Name, time.Since(paused).Round(time.Millisecond)))
		for name, mirror := range h.mirrors {
			if err := waitFor(ctx, 30*time.Second, func(ctx context.Context) error {
				if p, _ := h.probe(ctx, mirror, false); p.err != nil || p.code != http.StatusOK {
					return fmt.Errorf("a consistent read of %s at %s answered %s", h.shard, name, p)
				}
				return nil
			}); err != nil {
				h.found(Violation{Check: "pause-return", Details: fmt.Sprintf("30 s after SIGCONT of %s: %v", h.home.Name, err)})
			}
		}
	}
}
