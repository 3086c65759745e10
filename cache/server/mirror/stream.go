package mirror

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/klog/v2"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

// stream mirrors one type of one peer: a list of the peer's wildcard, then a
// watch from the list's resourceVersion, applied in order, one object at a
// time. Applying in order is what makes the applied revision meaningful:
// every change of the peer up to it is here.
type stream struct {
	m    *Mirror
	peer *source
	gvr  schema.GroupVersionResource

	// applyMu makes a stale read's header exact (header.go): the stream
	// holds it (to write) while it applies one event and records the
	// event's revision, and while it marks a list's convergence begun or
	// done; a stale read holds it (to read) from taking its header's
	// revision until it has fixed the local revision it is served at, so
	// that no change of this stream lands in between.
	applyMu sync.RWMutex

	mu sync.Mutex
	// mixed is set while a list is applied to the copy, and from a change
	// that failed to apply (it may have landed all the same: a write that
	// timed out) until the next list: the copy may then be a mix of two
	// states of the home, which no revision describes, and stale reads get
	// no revision of this stream.
	mixed bool
	// applied is the peer revision every change of the type up to which is
	// applied here; 0 before the first list.
	applied int64
	// epoch is the peer's epoch in which applied was reached.
	epoch string
	// listEpoch is the peer's epoch at the current list: copies written
	// from this list and its watch record it (kcpcache.AnnotationHomeEpoch).
	// Only the stream's goroutine uses it.
	listEpoch string
	// confirmedAt is the latest time at which the copy is known to have
	// held every change the peer had: when a list was sent, or a revision
	// answer was asked for (a consistent read's check, or the stream's
	// own every confirmInterval) that the copy then caught up with. An
	// event or a bookmark is no confirmation: it may have waited behind
	// others (a mirror replaying after a cut link), and says nothing of
	// what came after it.
	confirmedAt time.Time
	// advanced is closed and replaced whenever applied moves.
	advanced chan struct{}
	// listRevision and changed say, per shard, the peer revision of the
	// last change to the shard's data of this type applied here: changed
	// holds the shards with an event since the last list, every other
	// shard counts as changed at the list's revision (a list does not say
	// when a deletion before it happened). This is what the copy reflects
	// for kcpcache.HomeRevisionHeader; applied, which counts every change
	// of the peer, would make a reader refuse a mirror that has all of a
	// partition but less of the rest of the home.
	listRevision int64
	changed      map[string]int64
	// pendingRelease is the release generation (restored.go) a list must
	// start at or after before the stream counts as current again; 0 when
	// none is pending.
	pendingRelease int64
	// pendingList is the list request (moving.go) a list must start at or
	// after before the stream counts as current again; 0 when none is
	// pending. A shard whose home moved to the peer is in no state of the
	// peer's that this cache reflects until it listed the peer again.
	pendingList int64
	// relayed is what the stream knows of each home the peer relays
	// (relay.go), and followed the relayed homes whose objects it takes:
	// those the peer confirmed before the stream's last list. epochs are
	// the followed homes' epochs as that confirmation named them; only the
	// stream's goroutine uses it.
	relayed  map[string]*relayState
	followed map[string]bool
	epochs   map[string]string
	// epochsAsked is when each followed home's confirmation was asked;
	// only the stream's goroutine uses it.
	epochsAsked map[string]time.Time
	// followedGen is, for each followed home, the route generation
	// (homes.Table.Upstream) at which the peer was its upstream when it
	// confirmed the home before the last list.
	followedGen map[string]uint64
}

// releasePending reports whether the stream waits for a list after a
// release or a list request.
func (s *stream) releasePending() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pendingRelease != 0 || s.pendingList != 0
}

// needList marks the stream behind until a list started at list request
// gen or later.
func (s *stream) needList(gen int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pendingList = max(s.pendingList, gen)
	s.m.stateVersion.Add(1)
}

// needRelist marks the stream behind until a list started at release
// generation gen or later.
func (s *stream) needRelist(gen int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pendingRelease = max(s.pendingRelease, gen)
}

func newStream(m *Mirror, p *source, gvr schema.GroupVersionResource) *stream {
	return &stream{m: m, peer: p, gvr: gvr, advanced: make(chan struct{}), changed: map[string]int64{},
		relayed: map[string]*relayState{}, followed: map[string]bool{}, epochs: map[string]string{}, followedGen: map[string]uint64{}}
}

// state returns what the stream has applied and when it was confirmed.
func (s *stream) state() (applied int64, epoch string, confirmedAt time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.applied, s.epoch, s.confirmedAt
}

// advance records that every change up to rev is applied.
func (s *stream) advance(rev int64, epoch string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if epoch != s.epoch {
		// A new epoch of the peer starts a new sequence of revisions.
		s.epoch, s.applied = epoch, rev
	} else if rev > s.applied {
		s.applied = rev
	}
	close(s.advanced)
	s.advanced = make(chan struct{})
	s.m.stateVersion.Add(1)
	appliedRevision.WithLabelValues(s.peer.Name, s.gvr.GroupResource().String()).Set(float64(s.applied))
}

// listed records a list at rev, started at release generation
// releaseGeneration and list request listRequest: every shard's data is as
// of rev, and the list's convergence is over.
func (s *stream) listed(rev, releaseGeneration, listRequest int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if releaseGeneration >= s.pendingRelease {
		s.pendingRelease = 0
	}
	if listRequest >= s.pendingList {
		s.pendingList = 0
	}
	s.listRevision = rev
	s.changed = map[string]int64{}
	s.mixed = false
	s.m.stateVersion.Add(1)
}

// convergeBegins marks the copy mixed while a list is applied to it.
func (s *stream) convergeBegins() {
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	s.setMixed()
}

// setMixed marks the copy as no one state of the home until the next list.
func (s *stream) setMixed() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mixed = true
	s.m.stateVersion.Add(1)
}

// isMixed reports whether the copy may be a mix of two states of the home.
func (s *stream) isMixed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mixed
}

// changedAt records a change of shard's data at rev.
func (s *stream) changedAt(shard string, rev int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.changed[shard] = rev
	s.m.stateVersion.Add(1)
}

// lastChange is the revision of the last change of shard's data (the
// wildcard: of any shard's) applied here; see changed.
func (s *stream) lastChange(shard string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if shard != kcpcache.Wildcard {
		return max(s.listRevision, s.changed[shard])
	}
	last := s.listRevision
	for _, rev := range s.changed {
		last = max(last, rev)
	}
	return last
}

// confirmAt records that the copy held every change the peer had at
// time at.
func (s *stream) confirmAt(at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if at.After(s.confirmedAt) {
		s.confirmedAt = at
	}
}

// confirmInterval is how often a stream asks its peer for the revision of
// its type, so that the age of a stale read (kcpcache.FreshnessAgeHeader)
// stays about this small while the copy keeps up: one small request per
// peer and type.
const confirmInterval = time.Second

// confirmLoop asks the peer for the revision of every partition's data of
// the stream's type every confirmInterval, and confirms the copy at the
// time it asked once the stream has applied that revision (within the
// next interval), until ctx ends.
func (s *stream) confirmLoop(ctx context.Context) {
	gr := s.gvr.GroupResource()
	ticker := time.NewTicker(confirmInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		asked := time.Now()
		actx, cancel := context.WithTimeout(ctx, confirmInterval)
		ans, err := s.peer.askRevision(actx, kcpcache.Wildcard, s.peer.Name, gr)
		if err == nil {
			if _, ok := s.waitApplied(actx, ans.Revision, ans.Epoch); ok {
				s.confirmAt(asked)
			}
		}
		cancel()
		// Each relayed home is asked along its path: its copy here is
		// confirmed by the home, never by the relay alone.
		for _, home := range s.m.homes.RoutedVia(s.peer.Name) {
			if !s.isFollowed(home) {
				continue
			}
			asked := time.Now()
			actx, cancel := context.WithTimeout(ctx, confirmInterval)
			ans, err := s.peer.askRevision(actx, kcpcache.Wildcard, home, gr)
			if err == nil {
				if _, ok := s.waitApplied(actx, ans.Revision, ans.Epoch); ok {
					s.resolve(ans, asked, kcpcache.Wildcard)
				}
			}
			cancel()
		}
	}
}

// isFollowed reports whether the stream takes home's objects (relay.go).
func (s *stream) isFollowed(home string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.followed[home]
}

// followsThroughout reports whether the stream takes home's objects and
// has since its last list without a break: the peer has been the home's
// upstream all along, at the route generation at which it confirmed the
// home. From the moment another peer becomes the upstream, this stream
// skips the home's changes and still advances past them (its peer's
// revisions count every change of the peer), so a revision of the peer
// it has applied no longer says that the home's changes up to it are
// here; and a route that left this peer and came back may have skipped
// some in between, until the list that follows the return.
func (s *stream) followsThroughout(home string) bool {
	peer, gen, ok := s.m.homes.Upstream(home)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.followed[home] && ok && peer == s.peer.Name && s.followedGen[home] == gen
}

// relayRetry is how soon a stream lists again when its peer could not
// confirm a home it relays before the last list (a hop down, a path just
// switched to): the copies of that home here wait as they are till then.
const relayRetry = 5 * time.Second

// confirmRelayed asks the peer, before a list, for its revision of every
// home it relays to this cache: the homes it confirmed are followed by the
// list (their objects taken, and the copies it lacks deleted); the others
// are left as they are. It returns whether some home was not confirmed.
func (s *stream) confirmRelayed(ctx context.Context) (missing bool) {
	gr := s.gvr.GroupResource()
	epochs := map[string]string{}
	gens := map[string]uint64{}
	asked := map[string]time.Time{}
	for _, home := range s.m.homes.RoutedVia(s.peer.Name) {
		// The generation is read before the question: a route that
		// changes after it makes the home's reads through this stream
		// refused (followsThroughout) until the next list.
		peer, gen, ok := s.m.homes.Upstream(home)
		if !ok || peer != s.peer.Name {
			continue
		}
		gens[home] = gen
		asked[home] = time.Now()
		actx, cancel := context.WithTimeout(ctx, s.m.cfg.FreshnessWait)
		ans, err := s.peer.askRevision(actx, kcpcache.Wildcard, home, gr)
		cancel()
		if err != nil {
			klog.FromContext(ctx).V(2).Info("A relayed home is not confirmed through the peer: its copies stay as they are until the next list", "home", home, "err", err)
			missing = true
			continue
		}
		epochs[home] = ans.Relayed.HomeEpoch
	}
	s.epochs, s.epochsAsked = epochs, asked
	s.mu.Lock()
	s.followed = map[string]bool{}
	s.followedGen = map[string]uint64{}
	for home := range epochs {
		s.followed[home] = true
		s.followedGen[home] = gens[home]
	}
	s.mu.Unlock()
	return missing
}

// waitApplied waits until the stream has applied rev in epoch, or ctx ends.
func (s *stream) waitApplied(ctx context.Context, rev int64, epoch string) (int64, bool) {
	for {
		s.mu.Lock()
		applied, current, ch, pending := s.applied, s.epoch, s.advanced, s.pendingRelease+s.pendingList
		s.mu.Unlock()
		if current == epoch && applied >= rev && pending == 0 {
			return applied, true
		}
		select {
		case <-ch:
		case <-ctx.Done():
			if current != epoch {
				return 0, false
			}
			return applied, false
		}
	}
}

// restartBackoff spaces a stream's attempts while its peer does not answer.
// Its cap bounds how long a mirror takes to follow a home again after the
// home returns: with a 10 s cap, a home that stopped cleanly (its port
// refuses at once, so the delay climbs to the cap within seconds) was
// followed again 7.6-9.9 s after its return. A failed attempt costs the
// peer nothing (its connection is refused) or one LIST, so every 2 s per
// stream is cheap; 2 s is also how often a cache polls its peers' homes.
var restartBackoff = wait.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Jitter: 0.2, Steps: 4, Cap: 2 * time.Second}

// run lists and watches until ctx ends, starting over after any failure.
func (s *stream) run(ctx context.Context) {
	logger := klog.FromContext(ctx).WithValues("peer", s.peer.Name, "resource", s.gvr.GroupResource().String())
	ctx = klog.NewContext(ctx, logger)
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { s.confirmLoop(ctx) })
	delay := restartBackoff
	gr := s.gvr.GroupResource().String()
	for ctx.Err() == nil {
		if !s.m.homes.PeerPassesOn(s.peer.Name, gr) {
			// The peer stopped passing this resource on to this cache
			// (--pass-on there, as its table says): idle until it does.
			select {
			case <-ctx.Done():
				return
			case <-time.After(s.m.cfg.TypeInterval):
			}
			continue
		}
		listed, err := s.listAndWatch(ctx)
		if ctx.Err() != nil {
			return
		}
		if listed {
			// The peer answered: a later interruption is a new one.
			delay = restartBackoff
		}
		if err == nil {
			continue
		}
		logger.Info("Mirror stream interrupted; starting over", "err", err)
		streamRestarts.WithLabelValues(s.peer.Name).Inc()
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay.Step()):
		}
	}
}

// listAndWatch makes the copies of the peer's home objects exact, then
// follows the peer's changes until the watch ends. It returns nil when the
// watch ended in a way that only needs a new list (expired resourceVersion),
// and whether the peer's list was applied.
func (s *stream) listAndWatch(ctx context.Context) (listed bool, err error) {
	res := s.peer.Client().Cluster(kcpcache.Wildcard, kcpcache.Wildcard).Resource(s.gvr)
	releaseGeneration := s.peer.holds.releaseGeneration()
	// Taken before the list: a relist requested while the list is applied
	// (a shard's home moved to the peer just then, and the list skipped its
	// objects) must end the watch that follows it, not be missed.
	relist, listRequest := s.peer.relistChan()
	relayMissing := s.confirmRelayed(ctx)
	asked := time.Now()
	list, err := res.List(ctx, metav1.ListOptions{Limit: listPageSize})
	if err != nil {
		return false, fmt.Errorf("listing at the peer: %w", err)
	}
	epoch, _ := s.peer.Client().Epochs().Current()
	s.listEpoch = epoch
	rev, err := strconv.ParseInt(list.GetResourceVersion(), 10, 64)
	if err != nil {
		return false, fmt.Errorf("the peer's list resourceVersion %q is not a revision: %w", list.GetResourceVersion(), err)
	}
	s.convergeBegins()
	more := func(ctx context.Context, token string) (*unstructured.UnstructuredList, error) {
		// The continue token keeps the first page's revision: every page
		// is of the same list.
		return res.List(ctx, metav1.ListOptions{Limit: listPageSize, Continue: token})
	}
	if err := s.converge(ctx, list, more); err != nil {
		return false, err
	}
	s.applyMu.Lock()
	s.listed(rev, releaseGeneration, listRequest)
	s.relayListed(rev, s.epochs, s.epochsAsked)
	s.advance(rev, epoch)
	s.applyMu.Unlock()
	s.confirmAt(asked)
	if s.peer.holds.releaseGeneration() != releaseGeneration {
		// Partitions were released while this list was applied: it
		// skipped them. List again.
		return true, nil
	}

	resourceVersion := list.GetResourceVersion()
	for ctx.Err() == nil {
		w, err := res.Watch(ctx, metav1.ListOptions{ResourceVersion: resourceVersion, AllowWatchBookmarks: true})
		if err != nil {
			return true, fmt.Errorf("watching the peer: %w", err)
		}
		if epoch, _ := s.peer.Client().Epochs().Current(); epoch != s.listEpoch {
			// The peer answers in another epoch (its data was lost or
			// restored): its revisions start over, and a watch from ours
			// would wait silently for a revision it may never reach,
			// dropping what comes before. List again.
			w.Stop()
			return true, nil
		}
		var retry <-chan time.Time
		if relayMissing {
			retry = time.After(relayRetry)
		}
		resourceVersion, err = s.follow(ctx, w, resourceVersion, relist, retry)
		w.Stop()
		if errors.Is(err, errRelist) {
			return true, nil
		}
		if err != nil {
			return true, err
		}
	}
	return true, nil
}

// errRelist ends a watch that must be followed by a new list at once.
var errRelist = errors.New("list again")

// follow applies the events of w and returns the resourceVersion to watch
// from next.
func (s *stream) follow(ctx context.Context, w watch.Interface, from string, relist <-chan struct{}, retry <-chan time.Time) (string, error) {
	last := from
	released := s.peer.holds.releasedChan()
	for {
		select {
		case <-ctx.Done():
			return last, nil
		case <-released:
			// Held partitions were released: list again to take them up.
			return last, errRelist
		case <-relist:
			return last, errRelist
		case <-retry:
			// A relayed home was not confirmed before the list: try again.
			return last, errRelist
		case ev, ok := <-w.ResultChan():
			if !ok {
				return last, nil
			}
			if ev.Type == watch.Error {
				status := apierrors.FromObject(ev.Object)
				if apierrors.IsResourceExpired(status) || apierrors.IsGone(status) {
					return last, errRelist
				}
				return last, fmt.Errorf("watch error: %w", status)
			}
			u, ok := ev.Object.(*unstructured.Unstructured)
			if !ok {
				return last, fmt.Errorf("unexpected watch object %T", ev.Object)
			}
			if err := s.applyEvent(ctx, ev.Type, u); err != nil {
				return last, err
			}
			last = u.GetResourceVersion()
		}
	}
}

// applyEvent applies one event of the peer's watch and records its
// revision, holding applyMu: a stale read sees the copy either before the
// event and its revision or after both.
func (s *stream) applyEvent(ctx context.Context, t watch.EventType, u *unstructured.Unstructured) error {
	rev, err := strconv.ParseInt(u.GetResourceVersion(), 10, 64)
	if err != nil {
		return fmt.Errorf("event resourceVersion %q is not a revision: %w", u.GetResourceVersion(), err)
	}
	// Whether the peer still holds the object's shard may take a question
	// to the peer, which can wait up to the freshness wait: it is asked
	// before applyMu is taken, since every stale read of this stream's
	// types waits for applyMu. Holding it while asking made a stale read,
	// which must be answered without the peer, wait on a peer that answers
	// slowly (paused, or behind a cut link).
	take := t == watch.Deleted
	if t == watch.Added || t == watch.Modified {
		take, err = s.stillPeersShard(ctx, u)
	}
	shard := u.GetAnnotations()[kcpcache.AnnotationShard]
	home, relayed := s.relayedHomeOf(shard)
	if relayed && take && err == nil && t != watch.Deleted && t != watch.Bookmark {
		if epoch := u.GetAnnotations()[kcpcache.AnnotationHomeEpoch]; epoch != "" && s.epochs[home] != "" && epoch != s.epochs[home] {
			// The relay holds copies of another epoch of the home now:
			// the home lost or went back in its data. Hold its
			// partitions here too before taking anything of the new
			// epoch (restored.go); a list after the release follows it.
			s.peer.holdHome(ctx, s.m, home, epoch)
			take = false
		}
	}
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	switch {
	case err != nil:
	case !take:
	case t == watch.Added || t == watch.Modified:
		err = s.applyPeerObject(ctx, u, t == watch.Added, true)
	case t == watch.Deleted:
		err = s.applyPeerDeletion(ctx, u)
	}
	if err != nil {
		// The stream starts over with a list; until then the change may
		// be in the copy without its revision counted.
		s.setMixed()
		return err
	}
	switch {
	case t == watch.Bookmark || s.peer.holds.isHeld(shard):
	case relayed && take:
		homeRev, _ := strconv.ParseInt(u.GetAnnotations()[kcpcache.AnnotationHomeResourceVersion], 10, 64)
		s.relayChanged(home, shard, u.GetAnnotations()[kcpcache.AnnotationHomeEpoch], rev, homeRev, t == watch.Deleted)
	case !relayed:
		s.changedAt(shard, rev)
	}
	epoch, _ := s.peer.Client().Epochs().Current()
	s.advance(rev, epoch)
	return nil
}
