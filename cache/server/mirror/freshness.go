package mirror

import (
	"context"
	"fmt"
	"net/url"
	"sort"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/server/homes"
)

// The reasons a consistent read of mirrored data is refused, in the causes
// of its 503 Status, besides homes.ReasonHomeUnreachable (the home did not
// say its revision in time), homes.ReasonHomeConflict and
// ReasonHomeRestored (restored.go).
const (
	// ReasonMirrorBehind: the home answered, but the mirror did not reach
	// its revision in time (or has not listed the type from it yet).
	ReasonMirrorBehind = "MirrorBehind"
	// ReasonHomeNoRoute: the shard's home is not this cache, and no peer
	// has offered a path to it: this cache holds no copy it could vouch
	// for.
	ReasonHomeNoRoute = "HomeNoRoute"
	// ReasonNotPassedOn: a hop of the path to the home passes on only
	// some resources (--pass-on), not this one: this cache holds none of
	// the home's data of it, and says so rather than answer it absent.
	ReasonNotPassedOn = "NotPassedOn"
)

// NotFresh is why one home's part of a consistent read cannot be confirmed.
type NotFresh struct {
	Reason   string
	Home     string
	Shard    string
	Resource schema.GroupResource
	// Want is the home's revision, Have the mirror's; both zero when the
	// home did not answer.
	Want, Have int64
	// Hop names the link that failed along the path ("<from>-><to>"),
	// when one did.
	Hop string
	// Searched: the shard's claim is not known, and Home is a cache a
	// search for it did not reach (it may be the home).
	Searched bool
	Err      error
}

func (e *NotFresh) Error() string {
	if e.Hop != "" {
		return hopPrefix + e.Hop + ": " + e.reason()
	}
	return e.reason()
}

func (e *NotFresh) reason() string {
	what := fmt.Sprintf("%s of shard %q", e.Resource, e.Shard)
	if e.Shard == kcpcache.Wildcard {
		what = fmt.Sprintf("%s of the shards homed at %q", e.Resource, e.Home)
	}
	switch e.Reason {
	case ReasonHomeRestored:
		return fmt.Sprintf("%s: the home cache %q changed epoch (restored or lost its data); the copy here is held until the shard converges there again", what, e.Home)
	case homes.ReasonHomeConflict:
		return fmt.Sprintf("%s: two home claims of the same generation: %v; resolve with --adopt-shard at the cache that should be its home", what, e.Err)
	case ReasonNotPassedOn:
		return fmt.Sprintf("%s: the path from this cache to its home %q passes on only some resources (--pass-on), not this one: this cache holds none of it; read it at a cache that holds it", what, e.Home)
	case ReasonHomeNoRoute:
		return fmt.Sprintf("%s: its home is the cache %q, and no peer of this cache offers a path to it: this cache holds no copy it can vouch for", what, e.Home)
	case homes.ReasonHomeUnreachable:
		if e.Searched {
			if e.Shard == kcpcache.Wildcard {
				what = fmt.Sprintf("%s of every shard", e.Resource)
			}
			return fmt.Sprintf("%s: a shard whose home this cache does not know yet may be homed at the cache %q, which a search for its claim did not reach: %v", what, e.Home, e.Err)
		}
		return fmt.Sprintf("%s: the home cache %q did not confirm its revision: %v", what, e.Home, e.Err)
	default:
		if e.Want == 0 && e.Have == 0 {
			return fmt.Sprintf("%s: this cache has not listed it from its home %q yet", what, e.Home)
		}
		return fmt.Sprintf("%s: the mirror of home %q is at revision %d, the home at %d", what, e.Home, e.Have, e.Want)
	}
}

// askRevision asks the peer for its revision of shard's data of gr; of
// home's, which the peer relays, when home is not the peer.
func (p *source) askRevision(ctx context.Context, shard, home string, gr schema.GroupResource) (kcpcache.HomeRevisionAnswer, error) {
	q := url.Values{"shard": {shard}, "resource": {gr.String()}}
	if home != p.Name {
		q.Set(kcpcache.RevisionHomeParameter, home)
	}
	var ans kcpcache.HomeRevisionAnswer
	if err := p.GetJSON(ctx, kcpcache.RevisionPath, q, 1<<16, "the revision answer", &ans); err != nil {
		return kcpcache.HomeRevisionAnswer{}, err
	}
	if ans.Cache != p.Name {
		return kcpcache.HomeRevisionAnswer{}, fmt.Errorf("the peer configured as %q answers as cache %q", p.Name, ans.Cache)
	}
	if home != p.Name && (ans.Relayed == nil || ans.Relayed.Home != home) {
		return kcpcache.HomeRevisionAnswer{}, fmt.Errorf("the peer %q does not relay the home %q now", p.Name, home)
	}
	if home == p.Name && ans.Relayed != nil {
		return kcpcache.HomeRevisionAnswer{}, fmt.Errorf("the peer %q is not the home of the data asked (it relays %q)", p.Name, ans.Relayed.Home)
	}
	return ans, nil
}

// targetsOf returns the homes a read of shard must be confirmed with, each
// with the peer its partitions come from: its home if that is not this
// cache; every peer if the shard's home is not known (it may have data at
// any of them); for the wildcard, every peer and every home known by the
// claims. It also returns the refusals the claims alone decide: a shard in
// conflict, or homed at a cache no peer offers a path to.
func (m *Mirror) targetsOf(shard string) ([]target, []*NotFresh) {
	var refused []*NotFresh
	refuse := func(c kcpcache.HomeClaim, conflict string) bool {
		switch {
		case conflict != "":
			refused = append(refused, &NotFresh{Reason: homes.ReasonHomeConflict, Home: c.Home, Shard: c.Shard, Err: fmt.Errorf("the caches %q and %q both claim it at generation %d", c.Home, conflict, c.Generation)})
			return true
		case c.Home != m.cfg.CacheName && m.sourceFor(c.Home) == nil:
			refused = append(refused, &NotFresh{Reason: ReasonHomeNoRoute, Home: c.Home, Shard: c.Shard})
			return true
		}
		return false
	}
	byHome := map[string]target{}
	if shard != kcpcache.Wildcard {
		if c, conflict, ok := m.homes.Lookup(shard); ok {
			if refuse(c, conflict) {
				return nil, refused
			}
			if c.Home == m.cfg.CacheName {
				return nil, nil
			}
			return []target{{src: m.sourceFor(c.Home), home: c.Home}}, nil
		}
	} else {
		claims, conflicts := m.homes.Known()
		for _, c := range claims {
			if refuse(c, conflicts[c.Shard]) || c.Home == m.cfg.CacheName {
				continue
			}
			byHome[c.Home] = target{src: m.sourceFor(c.Home), home: c.Home}
		}
	}
	for name := range m.peers {
		if _, ok := byHome[name]; !ok {
			if src := m.sourceFor(name); src != nil {
				byHome[name] = target{src: src, home: name}
			}
		}
	}
	out := make([]target, 0, len(byHome))
	for _, t := range byHome {
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].home < out[j].home })
	return out, refused
}

// NotPassedOn returns a refusal per home a read of shard's data of gr
// covers whose path passes gr on to this cache: its copy holds none of it,
// and any answer, stale or consistent, would say it is absent.
func (m *Mirror) NotPassedOn(shard string, gr schema.GroupResource) []*NotFresh {
	targets, _ := m.targetsOf(shard)
	var out []*NotFresh
	for _, t := range targets {
		if !m.homes.Holds(t.home, gr.String()) {
			out = append(out, &NotFresh{Reason: ReasonNotPassedOn, Home: t.home, Shard: shard, Resource: gr})
		}
	}
	return out
}

// Confirm confirms a consistent read of shard's data of gr: for each home
// it depends on, it asks the home for its revision and waits, at most the
// freshness wait, until the mirror has applied it. It returns the revision
// of each home the answer will reflect, or why it cannot confirm them.
func (m *Mirror) Confirm(ctx context.Context, shard string, gr schema.GroupResource) ([]kcpcache.HomeRevision, []*NotFresh) {
	// The claims are learnt from the peers' tables every few seconds, a
	// hop at a time; a consistent read must not miss a shard claimed
	// since, however far away (homes/search.go).
	if refused := m.learnClaims(ctx, shard, gr); len(refused) > 0 {
		for _, nf := range refused {
			freshnessChecks.WithLabelValues(nf.Home, nf.Reason).Inc()
		}
		return nil, refused
	}
	targets, refused := m.targetsOf(shard)
	if len(refused) > 0 {
		for _, nf := range refused {
			freshnessChecks.WithLabelValues(nf.Home, nf.Reason).Inc()
		}
		return nil, refused
	}
	if len(targets) == 0 {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, m.cfg.FreshnessWait)
	defer cancel()
	var (
		mu      sync.Mutex
		entries []kcpcache.HomeRevision
		failed  []*NotFresh
		wg      sync.WaitGroup
	)
	for _, t := range targets {
		wg.Go(func() {
			entry, nf := m.confirmWith(ctx, t, shard, gr)
			mu.Lock()
			defer mu.Unlock()
			result := "fresh"
			switch {
			case nf != nil:
				failed = append(failed, nf)
				result = nf.Reason
			case entry.Epoch != "":
				entries = append(entries, entry)
			default:
				// Confirmed, but the home's revision of the copy is not
				// known exactly: the read names no revision of this home
				// (an entry without an epoch is no revision a reader can
				// compare).
			}
			freshnessChecks.WithLabelValues(t.home, result).Inc()
		})
	}
	wg.Wait()
	sort.Slice(failed, func(i, j int) bool { return failed[i].Home < failed[j].Home })
	return entries, failed
}

// learnClaims learns the claims a consistent read of shard depends on. A
// shard whose claim is not known is searched for through every cache: its
// home may be beyond a relay and have claimed it a moment ago. A read of
// the wildcard reads the peers' tables, then searches for every shard
// another cache was claiming when its search reached this one and whose
// claim has not arrived since. It refuses the read when a search did not
// reach a cache that may hold the claim.
func (m *Mirror) learnClaims(ctx context.Context, shard string, gr schema.GroupResource) []*NotFresh {
	if shard != kcpcache.Wildcard {
		if _, _, known := m.homes.Lookup(shard); known {
			return nil
		}
		found := m.homes.Search(ctx, shard, false)
		if _, _, known := m.homes.Lookup(shard); known {
			return nil
		}
		return unreachedRefusals(shard, gr, found.Unreached)
	}
	m.homes.AskPeers(ctx, "")
	var (
		mu      sync.Mutex
		refused []*NotFresh
		wg      sync.WaitGroup
	)
	for s := range m.homes.PendingShards() {
		wg.Go(func() {
			unreached := m.homes.ResolvePending(ctx, s)
			mu.Lock()
			defer mu.Unlock()
			refused = append(refused, unreachedRefusals(kcpcache.Wildcard, gr, unreached)...)
		})
	}
	wg.Wait()
	sort.Slice(refused, func(i, j int) bool { return refused[i].Home < refused[j].Home })
	return refused
}

// unreachedRefusals are the refusals of a read of shard for the caches a
// search did not reach, one per cache.
func unreachedRefusals(shard string, gr schema.GroupResource, unreached []kcpcache.SearchUnreached) []*NotFresh {
	seen := map[string]bool{}
	var out []*NotFresh
	for _, u := range unreached {
		if seen[u.Cache] {
			continue
		}
		seen[u.Cache] = true
		out = append(out, &NotFresh{Reason: homes.ReasonHomeUnreachable, Home: u.Cache, Shard: shard, Resource: gr, Hop: u.Via + "->" + u.Cache, Searched: true, Err: fmt.Errorf("%s", u.Message)})
	}
	return out
}

// confirmWith confirms the part of a read of shard's data of gr whose home
// is t's. A resource served without identity (a CachedResource's
// publication) reads every identity's objects at once, so each of those
// types is confirmed; the answer reflects the last change of any of them.
func (m *Mirror) confirmWith(ctx context.Context, t target, shard string, gr schema.GroupResource) (kcpcache.HomeRevision, *NotFresh) {
	p := t.src
	covered := p.streamsFor(gr)
	if len(covered) == 0 {
		// A type this cache started serving since Run last looked (every
		// TypeInterval): look now, and wait for its stream.
		covered = m.awaitStreams(ctx, p, gr)
	}
	if len(covered) == 0 {
		covered = []coveredStream{{gr: gr}}
	}
	entry := kcpcache.HomeRevision{Home: t.home}
	inexact := false
	for _, c := range covered {
		e, nf := m.confirmType(ctx, t, shard, c.gr, c.s)
		if nf != nil {
			nf.Resource = gr
			return kcpcache.HomeRevision{}, nf
		}
		if e.Epoch == "" {
			// Current, its revision not known exactly: nor is the
			// revision of everything the read covers.
			inexact = true
			continue
		}
		if entry.Epoch != "" && e.Epoch != entry.Epoch {
			// The home changed epoch between two of the asks; neither
			// revision may be compared with the other.
			return kcpcache.HomeRevision{}, &NotFresh{Reason: ReasonHomeRestored, Home: t.home, Shard: shard, Resource: gr}
		}
		entry.Epoch, entry.Revision = e.Epoch, max(entry.Revision, e.Revision)
	}
	if inexact {
		return kcpcache.HomeRevision{Home: t.home}, nil
	}
	return entry, nil
}

// isHeld reports whether a read of shard's data whose home is t's finds
// it held after the home changed epoch (restored.go).
func (t target) isHeld(shard string) bool {
	if shard == kcpcache.Wildcard {
		return t.src.holds.anyHeld(t.home)
	}
	return t.src.holds.isHeld(shard)
}

// confirmType confirms shard's data of gr, one stored type, whose home is
// t's and whose stream at t's peer is s (nil: none). The entry it returns
// has no epoch when the copy is current but its home revision is not known
// exactly (a relayed deletion since the answer): the read is answered
// without a header entry for the home.
func (m *Mirror) confirmType(ctx context.Context, t target, shard string, gr schema.GroupResource, s *stream) (kcpcache.HomeRevision, *NotFresh) {
	p := t.src
	nf := &NotFresh{Home: t.home, Shard: shard, Resource: gr}
	if t.isHeld(shard) {
		nf.Reason = ReasonHomeRestored
		return kcpcache.HomeRevision{}, nf
	}
	asked := time.Now()
	ans, err := p.askRevision(ctx, shard, t.home, gr)
	if err != nil {
		// The peer may have given the shard up (homerevision.Handler),
		// or stopped relaying it: read the tables now rather than at the
		// next poll.
		m.homes.RequestPoll()
		return kcpcache.HomeRevision{}, notFreshFromPeer(m.cfg.CacheName, t, shard, gr, err)
	}
	homeEpoch := ans.Epoch
	if ans.Relayed != nil {
		homeEpoch = ans.Relayed.HomeEpoch
	}
	if s == nil {
		nf.Reason, nf.Want = ReasonMirrorBehind, ans.Revision
		return kcpcache.HomeRevision{}, nf
	}
	if !t.relayed() {
		if _, epoch, _ := s.state(); epoch != "" && epoch != ans.Epoch {
			// The home answers in another epoch than the copies here came
			// from: it lost or went back in its data. Hold before anything
			// is confirmed against the new epoch (restored.go).
			p.holdHome(ctx, m, t.home, ans.Epoch)
		}
	} else if epoch, _, _, _ := s.relayView(t.home, shard); epoch != "" && epoch != homeEpoch {
		// The same, told by a relay: it holds too, and so does every hop.
		p.holdHome(ctx, m, t.home, homeEpoch)
	}
	if t.isHeld(shard) {
		nf.Reason = ReasonHomeRestored
		return kcpcache.HomeRevision{}, nf
	}
	applied, ok := s.waitApplied(ctx, ans.Revision, ans.Epoch)
	if !ok {
		nf.Reason, nf.Want, nf.Have = ReasonMirrorBehind, ans.Revision, applied
		return kcpcache.HomeRevision{}, nf
	}
	if t.relayed() && !s.followsThroughout(t.home) {
		// The stream has not listed the home through this peer since the
		// peer confirmed it (relay.go): the copy here is as it was. Or
		// the home's route moved to another peer since: this stream
		// skipped the home's changes from then on, and its revision,
		// which waitApplied saw reach the answer's, does not say they
		// are here (the new upstream's stream has them once it listed).
		nf.Reason, nf.Err = ReasonMirrorBehind, fmt.Errorf("this cache has not listed it through %q since the route to it last changed", p.Name)
		return kcpcache.HomeRevision{}, nf
	}
	// The stream may have listed in a new epoch of the home while this
	// read waited, and held the partition then: the wait proves nothing.
	if t.isHeld(shard) {
		nf.Reason = ReasonHomeRestored
		return kcpcache.HomeRevision{}, nf
	}
	if t.relayed() {
		s.resolve(ans, asked, shard)
		_, last, exact, _ := s.relayView(t.home, shard)
		if !exact {
			return kcpcache.HomeRevision{Home: t.home}, nil
		}
		return kcpcache.HomeRevision{Home: t.home, Epoch: homeEpoch, Revision: last}, nil
	}
	if shard == kcpcache.Wildcard {
		// Every partition of the type is current as of the question; a
		// shard's answer says nothing of the others.
		s.confirmAt(asked)
	}
	return kcpcache.HomeRevision{Home: t.home, Epoch: ans.Epoch, Revision: s.lastChange(shard)}, nil
}

// Stale returns, for a read of shard's data of gr that is served without a
// check, the revision of each home the copy reflects and how long ago that
// home last confirmed it (through every hop: never the age since a relay
// confirmed it). A home whose type has not been listed yet is reported
// with revision 0.
func (m *Mirror) Stale(shard string, gr schema.GroupResource) ([]kcpcache.HomeRevision, map[string]time.Duration) {
	var entries []kcpcache.HomeRevision
	ages := map[string]time.Duration{}
	targets, _ := m.targetsOf(shard)
	for _, t := range targets {
		p := t.src
		covered := p.streamsFor(gr)
		if len(covered) > 1 {
			// A resource served without identity: the age of its oldest
			// identity's copy, and no revision (no one revision says
			// what every identity's copy includes).
			if age, ok := oldestAge(covered, t.home); ok {
				ages[t.home] = age
			}
			continue
		}
		if len(covered) == 0 {
			continue
		}
		s := covered[0].s
		if t.relayed() {
			epoch, last, exact, at := s.relayView(t.home, shard)
			if at.IsZero() {
				continue
			}
			ages[t.home] = time.Since(at)
			if exact && !t.isHeld(shard) && !s.releasePending() && !s.isMixed() {
				entries = append(entries, kcpcache.HomeRevision{Home: t.home, Epoch: epoch, Revision: last})
			}
			continue
		}
		_, epoch, at := s.state()
		if at.IsZero() {
			continue
		}
		ages[t.home] = time.Since(at)
		if t.isHeld(shard) || s.releasePending() || s.isMixed() {
			// A held copy is older than what the stream has seen of the
			// home's new epoch, and a mixed one (being relisted, or a
			// change failed to apply) may be a mix of two states of the
			// home: no revision of either would be true.
			continue
		}
		entries = append(entries, kcpcache.HomeRevision{Home: t.home, Epoch: epoch, Revision: s.lastChange(shard)})
	}
	return entries, ages
}

// oldestAge is the time since home least recently confirmed the copy of
// one of the streams; false if one never was.
func oldestAge(covered []coveredStream, home string) (time.Duration, bool) {
	var oldest time.Duration
	for _, c := range covered {
		_, _, at := c.s.state()
		if home != c.s.peer.Name {
			_, _, _, at = c.s.relayView(home, kcpcache.Wildcard)
		}
		if at.IsZero() {
			return 0, false
		}
		oldest = max(oldest, time.Since(at))
	}
	return oldest, true
}

// statusCauses turns refusals into the causes of a 503 Status: one cause
// per home, its type the reason.
func statusCauses(failed []*NotFresh) []metav1.StatusCause {
	out := make([]metav1.StatusCause, 0, len(failed))
	for _, f := range failed {
		out = append(out, metav1.StatusCause{Type: metav1.CauseType(f.Reason), Message: f.Error(), Field: f.Home})
	}
	return out
}
