package homes

import (
	"context"
	"slices"
	"sort"
	"time"

	"k8s.io/klog/v2"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

// Routes make a hierarchy of any shape: a cache relays what it mirrors, and
// says so in its table (kcpcache.HomesAnswer.Routes: per home, the path
// from it to the home). Each cache takes a home's partitions from one peer,
// its upstream for that home: of the peers whose latest table offers a
// path to the home that does not name this cache, the one with the
// shortest path (the current upstream on a tie, then the first by name).
// A path never names the cache that takes it, so no partition comes back
// around a loop, in a chain, a star, a tree or a ring alike (a path-vector
// rule, as in BGP).
//
// A route is live while the peer offering it answered its table within
// routeLifetime, and a cache offers onward only its live routes, so a lost
// hop withdraws every route through it within about routeLifetime per hop.
// A cache whose upstream's route died keeps that upstream until another
// live path appears: its copies stay as they are (stale reads go on, a
// consistent read asks along the dead path and is refused naming the
// failed hop), and nothing is deleted because a path was lost.

// routeLifetime is how long a peer's offered routes count without a newer
// answer of its table: three polls, so that one slow answer does not make
// a mirror switch its upstream (which costs it a list of every type).
func (t *Table) routeLifetime() time.Duration { return 3 * t.cfg.PollInterval }

// offered is what a peer's latest table offered: its routes, and the
// resources it passes on to this cache (empty: all).
type offered struct {
	routes   map[string]kcpcache.Route
	passedOn []string
	at       time.Time
}

// upstream is this cache's choice for one home.
type upstream struct {
	peer string
	// path runs from this cache to the home.
	path []string
	live bool
	// gen is the table's route generation at which peer was chosen: it
	// changes with the peer, and only then (Upstream).
	gen uint64
}

// SetRouteEpochs tells the table how to read the epoch of a home as this
// cache's copies of its partitions came from it (the mirror knows), for
// the routes it offers.
func (t *Table) SetRouteEpochs(f func(home string) string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.routeEpoch = f
}

// OnRouteChange makes the table tell f when the peer a home's partitions
// are taken from changes (from "" for a home it had no upstream for).
func (t *Table) OnRouteChange(f func(ctx context.Context, home, from, to string)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.onRoute = f
}

// Via returns the peer a home's partitions are taken from, and whether
// its path is live. Before any peer offered a route to a home that is a
// peer itself, the home is its own upstream (a full mesh needs no routes).
func (t *Table) Via(home string) (peer string, live, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if u, known := t.upstreams[home]; known {
		return u.peer, u.live, true
	}
	if t.isPeer(home) {
		return home, false, true
	}
	return "", false, false
}

// Upstream returns the peer a home's partitions are taken from over a
// route, and the generation of that choice, which changes whenever the
// peer does and only then (a path through the same peer changing, or
// going dead, keeps it): a mirror that took a home through a peer at one
// generation knows, while the generation stays, that no change of the
// home was meant to come through another peer since (a stream skips the
// home's changes from the moment its peer is no longer the upstream, and
// still advances past them). ok is false for a home no route was ever
// offered for.
func (t *Table) Upstream(home string) (peer string, gen uint64, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	u, ok := t.upstreams[home]
	return u.peer, u.gen, ok
}

// Path returns the path from this cache to home, this cache first, as it
// takes the home's partitions now; nil when it has none.
func (t *Table) Path(home string) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if home == t.cfg.CacheName {
		return []string{home}
	}
	if u, ok := t.upstreams[home]; ok {
		return slices.Clone(u.path)
	}
	if t.isPeer(home) {
		return []string{t.cfg.CacheName, home}
	}
	return nil
}

// RoutedVia returns the homes other than peer itself whose partitions are
// taken from peer.
func (t *Table) RoutedVia(peer string) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []string
	for home, u := range t.upstreams {
		if u.peer == peer && home != peer {
			out = append(out, home)
		}
	}
	sort.Strings(out)
	return out
}

// isPeer reports whether name is a peer; t.mu held.
func (t *Table) isPeer(name string) bool {
	for _, p := range t.peers {
		if p.Name == name {
			return true
		}
	}
	return false
}

// learnRoutes records the routes a peer's table offered. The upstreams are
// chosen again once every peer asked in the same round has answered
// (chooseRoutes), not at each answer: peers answer in any order, and a
// choice made on the first answer alone took the longer path of a peer
// that happened to answer first, then switched to the shorter one at the
// next answer, each switch costing the mirror a list of every type
// (TestRoutesTakeTheShortestPathThatAvoidsThisCache failed so, 9 runs in
// 10).
func (t *Table) learnRoutes(peer string, routes []kcpcache.Route, passedOn []string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	o := offered{routes: map[string]kcpcache.Route{}, passedOn: passedOn, at: time.Now()}
	for _, r := range routes {
		if r.Home == "" || len(r.Path) == 0 || r.Path[0] != peer || r.Path[len(r.Path)-1] != r.Home {
			// Not a path from the peer to the home: ignored.
			continue
		}
		o.routes[r.Home] = r
	}
	t.offers[peer] = o
}

// chooseRoutes chooses the upstreams again from the live offers and tells
// the mirror of the changes: after a round of answers (askPeers), and at
// every poll, so that offers that aged out stop counting.
func (t *Table) chooseRoutes(ctx context.Context) {
	t.mu.Lock()
	changes := t.chooseRoutesLocked(ctx)
	notify := t.onRoute
	t.mu.Unlock()
	for _, c := range changes {
		if notify != nil {
			notify(ctx, c.home, c.from, c.to)
		}
	}
}

type routeChange struct{ home, from, to string }

// chooseRoutesLocked picks every home's upstream from the live offers;
// t.mu held. It returns the homes whose upstream changed.
func (t *Table) chooseRoutesLocked(ctx context.Context) []routeChange {
	self := t.cfg.CacheName
	now := time.Now()
	homes := map[string]bool{}
	for _, o := range t.offers {
		for h := range o.routes {
			homes[h] = true
		}
	}
	for h := range t.upstreams {
		homes[h] = true
	}
	peers := make([]string, 0, len(t.offers))
	for p := range t.offers {
		peers = append(peers, p)
	}
	sort.Strings(peers)
	var changes []routeChange
	for home := range homes {
		if home == self {
			continue
		}
		current, had := t.upstreams[home]
		var best *upstream
		for _, p := range peers {
			o := t.offers[p]
			r, ok := o.routes[home]
			if !ok || now.Sub(o.at) > t.routeLifetime() || slices.Contains(r.Path, self) {
				continue
			}
			path := append([]string{self}, r.Path...)
			better := best == nil || len(path) < len(best.path) ||
				len(path) == len(best.path) && had && p == current.peer && best.peer != current.peer
			if better {
				best = &upstream{peer: p, path: path, live: true}
			}
		}
		switch {
		case best != nil:
			best.gen = current.gen
			if !had || current.peer != best.peer {
				klog.FromContext(ctx).Info("Taking a home's partitions through another peer", "home", home, "from", current.peer, "to", best.peer, "path", best.path)
				changes = append(changes, routeChange{home, current.peer, best.peer})
				t.routeGen++
				best.gen = t.routeGen
			}
			t.upstreams[home] = *best
		case had && current.live:
			klog.FromContext(ctx).Info("No live path to a home: keeping its copies as they are, from the last peer that offered one", "home", home, "peer", current.peer)
			current.live = false
			t.upstreams[home] = current
		}
	}
	return changes
}

// offeredRoutes are the routes this cache offers in its table to asker
// (a peer, or ""): its own, and each home it takes over a live path, each
// with the resources of it this cache holds and passes on to the asker.
// A home of which it would pass on nothing is not offered.
func (t *Table) offeredRoutes(asker string) []kcpcache.Route {
	passOn := t.cfg.PassOn[asker]
	self := kcpcache.Route{Home: t.cfg.CacheName, Path: []string{t.cfg.CacheName}, Resources: passOn}
	if t.cfg.Epoch != nil {
		self.Epoch = t.cfg.Epoch()
	}
	out := []kcpcache.Route{self}
	t.mu.Lock()
	epochOf := t.routeEpoch
	for home, u := range t.upstreams {
		if !u.live {
			continue
		}
		held, restricted := t.resourcesVia(home, u.peer)
		resources, some := narrow(held, restricted, passOn)
		if !some {
			continue
		}
		out = append(out, kcpcache.Route{Home: home, Path: slices.Clone(u.path), Resources: resources})
	}
	t.mu.Unlock()
	// The mirror's epochs are read without t.mu: the mirror asks the
	// table too.
	for i := 1; i < len(out); i++ {
		if epochOf != nil {
			out[i].Epoch = epochOf(out[i].Home)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Home < out[j].Home })
	return out
}

// resourcesVia returns the resources of home's data that this cache holds
// through peer (what the peer's route passes on, and what the peer passes
// on to it at all); restricted is false when that is everything. t.mu held.
func (t *Table) resourcesVia(home, peer string) (resources []string, restricted bool) {
	o, ok := t.offers[peer]
	if !ok {
		return nil, false
	}
	resources, restricted = o.routes[home].Resources, len(o.routes[home].Resources) > 0
	if len(o.passedOn) > 0 {
		resources, _ = narrow(resources, restricted, o.passedOn)
		restricted = true
	}
	return resources, restricted
}

// narrow intersects a restriction (held, when restricted) with a --pass-on
// list (empty: everything); some is false when nothing is left.
func narrow(held []string, restricted bool, passOn []string) (out []string, some bool) {
	switch {
	case !restricted:
		return passOn, true
	case len(passOn) == 0:
		return held, len(held) > 0
	}
	for _, r := range held {
		if slices.Contains(passOn, r) {
			out = append(out, r)
		}
	}
	return out, len(out) > 0
}

// Holds reports whether this cache holds the resource gr of home's data:
// whether every hop of its path to home passes gr on. Unknown homes hold
// everything (nothing restricts them).
func (t *Table) Holds(home string, gr string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if home == t.cfg.CacheName {
		return true
	}
	peer := home
	if u, ok := t.upstreams[home]; ok {
		peer = u.peer
	}
	resources, restricted := t.resourcesVia(home, peer)
	return !restricted || kcpcache.PassesOn(resources, gr)
}

// PeerPassesOn reports whether peer passes the resource gr on to this
// cache at all (its --pass-on for this cache, as its table says).
func (t *Table) PeerPassesOn(peer string, gr string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return kcpcache.PassesOn(t.offers[peer].passedOn, gr)
}

// PassesOnTo reports whether this cache passes the resource gr on to the
// peer asker (--pass-on).
func (t *Table) PassesOnTo(asker string, gr string) bool {
	return kcpcache.PassesOn(t.cfg.PassOn[asker], gr)
}
