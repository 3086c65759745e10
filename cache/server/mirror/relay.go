package mirror

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/endpoints/request"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/server/homes"
)

// A cache relays what it mirrors: a peer's stream carries the peer's own
// partitions and those of every home the peer takes over a path (package
// homes, routes.go), and this cache takes a home's partitions from the
// one peer its route names. What holds for one hop holds for many because
// every hop keeps the home's own terms:
//
//   - A relayed copy keeps its home's bookkeeping (home, home
//     resourceVersion, home epoch) as the relay holds it, and adds the relay
//     to its path (kcpcache.AnnotationHomePath); a copy whose path names
//     this cache is never taken.
//   - A revision question about a relayed home goes along the path
//     (kcpcache.RevisionPath with the home parameter): the relay confirms
//     its copy with its own upstream first, then answers its own revision
//     at which its copy holds everything the home had when the question
//     reached it, and that copy's last changes in the home's revisions
//     (kcpcache.RelayedRevision). Waiting for the relay's revision and
//     then for its answer's revisions makes the home-revision header of
//     every hop the home's, and a read confirmed at any depth holds every
//     write the home acknowledged before it was asked.
//   - A stream takes a relayed home's objects in a list only after such a
//     question through its peer was answered, asked before the list: the
//     peer's copy then holds everything the home had, so what the list
//     lacks the home deleted. A peer that cannot confirm (a hop down, a
//     path just switched to) is not followed for that home: its copies here
//     stay as they are, and the stream lists again later.

// target is one home whose data a read covers, and the peer its partitions
// are taken from (the home itself when it is a peer on the shortest path).
type target struct {
	src  *source
	home string
}

// relayed reports whether the home's partitions come through a relay.
func (t target) relayed() bool { return t.home != t.src.Name }

// sourceFor returns the peer home's partitions are taken from; nil when
// this cache has no route to it.
func (m *Mirror) sourceFor(home string) *source {
	via, _, ok := m.homes.Via(home)
	if !ok {
		return nil
	}
	return m.peers[via]
}

// relayState is what a stream knows of one relayed home's data of its
// type, in the home's revisions; a stream's own fields say the same of the
// peer's own partitions in the peer's revisions, which are the home's.
type relayState struct {
	// epoch is the home's epoch the copies came from.
	epoch string
	// base and shards are the home revision of each shard's last change
	// (the larger of base and the shard's entry), as the last resolving
	// answer said and events since.
	base   int64
	shards map[string]int64
	// unsureAll is the peer revision from which no shard's last change is
	// known (a list of the peer, a new epoch): 0 when known; unsure, per
	// shard, the peer revision of a deletion, whose home revision a
	// deleted copy does not carry. A resolving answer at a peer revision
	// at or after them clears them.
	unsureAll int64
	unsure    map[string]int64
	// known are the shards a shard's own resolving answer made known
	// since unsureAll was set: a list leaves every shard unsure, and a
	// consistent read asks about its shard alone, so without them no
	// read of one shard would name the home's revision until the
	// stream's next wildcard answer.
	known map[string]bool
	// confirmedAt is when the home last confirmed the copy here (a
	// question asked along the path that the copy then caught up with).
	confirmedAt time.Time
}

func newRelayState(epoch string, unsureFrom int64) *relayState {
	return &relayState{epoch: epoch, shards: map[string]int64{}, unsure: map[string]int64{}, known: map[string]bool{}, unsureAll: max(unsureFrom, 1)}
}

// lastChange returns the home revision of the last change of shard's data
// (the wildcard: any shard's), or false when it is not known exactly.
func (r *relayState) lastChange(shard string) (int64, bool) {
	if shard != kcpcache.Wildcard {
		if _, ok := r.unsure[shard]; ok || r.unsureAll != 0 && !r.known[shard] {
			return 0, false
		}
		return max(r.base, r.shards[shard]), true
	}
	if r.unsureAll != 0 {
		return 0, false
	}
	if len(r.unsure) > 0 {
		return 0, false
	}
	last := r.base
	for _, rev := range r.shards {
		last = max(last, rev)
	}
	return last, true
}

// relayOf returns the stream's state of home, creating it, unsure from
// peer revision rev, for a home met the first time; s.mu held.
func (s *stream) relayOf(home, epoch string, rev int64) *relayState {
	r, ok := s.relayed[home]
	if !ok {
		r = newRelayState(epoch, rev)
		s.relayed[home] = r
	}
	return r
}

// relayListed marks every relayed home's state unsure from the list at
// peer revision rev, and starts the homes confirmed before it (epochs),
// each confirmed at the time its question was asked (asked): the list
// holds everything the home had then, as a list of the peer's own
// partitions confirms them at the time it was sent.
func (s *stream) relayListed(rev int64, epochs map[string]string, asked map[string]time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for home, epoch := range epochs {
		r := newRelayState(epoch, rev)
		r.confirmedAt = asked[home]
		s.relayed[home] = r
	}
	for _, r := range s.relayed {
		r.unsureAll = max(r.unsureAll, rev)
		r.known = map[string]bool{}
	}
	s.m.stateVersion.Add(1)
}

// relayChanged records an event of a relayed home at peer revision rev:
// the home revision of an object's new state, or a deletion whose home
// revision is not known until the next resolving answer. It reports
// whether the event came from another epoch of the home than the copies
// (the caller holds the home's partitions).
func (s *stream) relayChanged(home, shard, epoch string, rev, homeRev int64, deleted bool) (otherEpoch bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.followed[home] {
		return false
	}
	r := s.relayOf(home, epoch, rev)
	s.m.stateVersion.Add(1)
	if epoch != "" && r.epoch != "" && epoch != r.epoch {
		s.relayed[home] = newRelayState(epoch, rev)
		return true
	}
	if r.epoch == "" {
		r.epoch = epoch
	}
	if deleted {
		r.unsure[shard] = rev
		return false
	}
	r.shards[shard] = max(r.shards[shard], homeRev)
	return false
}

// resolve takes a relayed answer about shard (or the wildcard) at peer
// revision ans.Revision, once the stream has applied it: every change the
// answer's revisions count is in the copy here, and the peer's copy did not
// change from then to through(ans), so what was unsure up to that is known.
func (s *stream) resolve(ans kcpcache.HomeRevisionAnswer, asked time.Time, shard string) {
	rr := ans.Relayed
	upTo := through(ans)
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.followed[rr.Home] {
		return
	}
	r := s.relayOf(rr.Home, rr.HomeEpoch, upTo)
	if r.epoch != rr.HomeEpoch {
		return
	}
	s.m.stateVersion.Add(1)
	if shard != kcpcache.Wildcard {
		// A shard's answer says nothing of the other shards. The shard's
		// last change at the relay is the larger of its base and its entry;
		// the copy here has every change of the relay up to upTo, a list
		// before it included, so the shard is known from it on.
		r.shards[shard] = max(r.shards[shard], rr.Base, rr.Shards[shard])
		if r.unsureAll != 0 && r.unsureAll <= upTo {
			r.known[shard] = true
		}
		if u, ok := r.unsure[shard]; ok && u <= upTo && (r.unsureAll == 0 || r.known[shard]) {
			delete(r.unsure, shard)
		}
		return
	}
	r.base = max(r.base, rr.Base)
	for sh, rev := range rr.Shards {
		r.shards[sh] = max(r.shards[sh], rev)
	}
	if r.unsureAll <= upTo {
		r.unsureAll = 0
		r.known = map[string]bool{}
	}
	for sh, u := range r.unsure {
		if u <= upTo {
			delete(r.unsure, sh)
		}
	}
	if asked.After(r.confirmedAt) {
		r.confirmedAt = asked
	}
}

// relayView returns what the stream knows of home's data: its epoch, the
// last change of shard, and when the home last confirmed it.
func (s *stream) relayView(home, shard string) (epoch string, last int64, exact bool, confirmedAt time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.relayed[home]
	if !ok {
		return "", 0, false, time.Time{}
	}
	last, exact = r.lastChange(shard)
	// A home not followed (not confirmed before the last list) is frozen
	// here as it was: no revision of it is true now.
	return r.epoch, last, exact && s.followed[home], r.confirmedAt
}

// homeView returns what the stream's copy holds of home's data, in the
// home's revisions, for a relayed answer: the base and per-shard last
// changes (of shard only, unless the wildcard); false when it is not
// known exactly or the copy may be a mix of two states.
func (s *stream) homeView(home, shard string) (epoch string, base int64, shards map[string]int64, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mixed || s.pendingRelease != 0 || s.pendingList != 0 {
		return "", 0, nil, false
	}
	pick := func(all map[string]int64) map[string]int64 {
		out := map[string]int64{}
		for sh, rev := range all {
			if shard == kcpcache.Wildcard || sh == shard {
				out[sh] = rev
			}
		}
		return out
	}
	if home == s.peer.Name {
		return s.epoch, s.listRevision, pick(s.changed), s.applied > 0
	}
	r, found := s.relayed[home]
	if !found || !s.followed[home] || r.unsureAll != 0 && (shard == kcpcache.Wildcard || !r.known[shard]) {
		return "", 0, nil, false
	}
	for sh := range r.unsure {
		if shard == kcpcache.Wildcard || sh == shard {
			return "", 0, nil, false
		}
	}
	return r.epoch, r.base, pick(r.shards), true
}

// AnswerRevision answers a revision question about home's data of gr (of
// shard, or every shard homed there with the wildcard) that this cache
// relays: it confirms its copy along its own path first, then answers the
// local revision at which its copy holds all of it, and the copy's last
// changes in the home's revisions. A refusal is a 503 whose causes are the
// confirmation's, naming the hop that failed.
func (m *Mirror) AnswerRevision(ctx context.Context, shard, home string, gr schema.GroupResource) (kcpcache.HomeRevisionAnswer, *apierrors.StatusError) {
	if u, ok := request.UserFrom(ctx); ok {
		if peer, isPeer := kcpcache.PeerFromUser(u.GetName()); isPeer && !m.homes.PassesOnTo(peer, gr.String()) {
			return kcpcache.HomeRevisionAnswer{}, apierrors.NewForbidden(gr, "", fmt.Errorf("this cache passes on to the cache %q only some resources (--pass-on), not this one", peer))
		}
	}
	if shard != kcpcache.Wildcard {
		if _, _, known := m.homes.Lookup(shard); !known {
			// The asker learnt the claim by a search that took another
			// path than the route (homes/search.go): search too.
			m.homes.Search(ctx, shard, false)
		}
		if h, ok := m.homeOf(shard); !ok || h != home {
			return kcpcache.HomeRevisionAnswer{}, apierrors.NewServiceUnavailable(fmt.Sprintf("shard %q is not homed at %q by this cache's claims", shard, home))
		}
	}
	if !m.homes.Holds(home, gr.String()) {
		nf := &NotFresh{Reason: ReasonNotPassedOn, Home: home, Shard: shard, Resource: gr}
		return kcpcache.HomeRevisionAnswer{}, refusal(gr, []*NotFresh{nf})
	}
	src := m.sourceFor(home)
	if src == nil {
		nf := &NotFresh{Reason: ReasonHomeNoRoute, Home: home, Shard: shard, Resource: gr}
		return kcpcache.HomeRevisionAnswer{}, refusal(gr, []*NotFresh{nf})
	}
	ctx, cancel := context.WithTimeout(ctx, m.cfg.FreshnessWait)
	defer cancel()
	t := target{src: src, home: home}
	covered := src.streamsFor(gr)
	if len(covered) == 0 {
		// A type this cache started serving since the mirror last looked
		// (a type created at the home moments ago: kcp's identity
		// resources): look now and wait for its stream, as a consistent
		// read here would (confirmWith).
		covered = m.awaitStreams(ctx, src, gr)
	}
	if len(covered) != 1 {
		// No stream yet, or a resource served without identity (one
		// stream per identity, no one revision for them all).
		nf := &NotFresh{Reason: ReasonMirrorBehind, Home: home, Shard: shard, Resource: gr}
		return kcpcache.HomeRevisionAnswer{}, refusal(gr, []*NotFresh{nf})
	}
	entry, nf := m.confirmType(ctx, t, shard, gr, covered[0].s)
	if nf != nil {
		return kcpcache.HomeRevisionAnswer{}, refusal(gr, []*NotFresh{nf})
	}
	s := covered[0].s
	// As for a stale read's header (header.go): the stream is held from
	// reading its state until the local revisions that cover it are fixed.
	// The answer names two: the last change of the asked data here, which
	// the asker waits for, and the storage's revision, through which the
	// copy stayed so. The asker's stream of gr sees only changes of gr:
	// the storage's revision alone, moved by any other write here (a
	// heartbeat's copy, a persisted claim), may never come in it, and an
	// asker waiting for it refused every consistent read of a relayed
	// home until the next change of gr here.
	s.applyMu.RLock()
	epoch, base, shards, ok := s.homeView(home, shard)
	var through, local int64
	var err error
	if ok && m.cfg.StorageRevision != nil && m.cfg.PartitionRevision != nil {
		through, err = m.coveringRevision(ctx, m.cfg.StorageRevision)
		if err == nil {
			// After the storage's revision: the last change it returns
			// covers every write up to that revision, so none of the
			// asked data lies between the two.
			local, err = m.cfg.PartitionRevision(ctx, shard, gr)
		}
	}
	s.applyMu.RUnlock()
	switch {
	case !ok || epoch != entry.Epoch:
		nf := &NotFresh{Reason: ReasonMirrorBehind, Home: home, Shard: shard, Resource: gr, Err: errors.New("the copy changed while it was confirmed")}
		return kcpcache.HomeRevisionAnswer{}, refusal(gr, []*NotFresh{nf})
	case m.cfg.StorageRevision == nil || m.cfg.PartitionRevision == nil || err != nil:
		nf := &NotFresh{Reason: ReasonMirrorBehind, Home: home, Shard: shard, Resource: gr, Err: fmt.Errorf("the local revision is unknown: %v", err)}
		return kcpcache.HomeRevisionAnswer{}, refusal(gr, []*NotFresh{nf})
	}
	return kcpcache.HomeRevisionAnswer{
		Cache: m.cfg.CacheName, Epoch: m.cfg.Epoch(), Revision: local,
		Relayed: &kcpcache.RelayedRevision{Home: home, HomeEpoch: epoch, Path: m.homes.Path(home), Base: base, Shards: shards, Through: max(through, local)},
	}, nil
}

// through is the relay's revision up to which a relayed answer knows its
// copy: RelayedRevision.Through, or the answer's revision from a relay that
// does not send it.
func through(ans kcpcache.HomeRevisionAnswer) int64 {
	if ans.Relayed == nil {
		return ans.Revision
	}
	return max(ans.Revision, ans.Relayed.Through)
}

// refusal is the 503 of a consistent read (or a relayed revision
// question) that cannot be confirmed: one cause per home.
func refusal(gr schema.GroupResource, failed []*NotFresh) *apierrors.StatusError {
	err := apierrors.NewServiceUnavailable(fmt.Sprintf("this cache cannot confirm that its copy is current: %v", failed[0]))
	err.ErrStatus.Details = &metav1.StatusDetails{Group: gr.Group, Kind: gr.Resource, Causes: statusCauses(failed)}
	return err
}

// hopPrefix starts a cause's message that names the hop that failed.
const hopPrefix = "hop "

// notFreshFromPeer turns a peer's refusal of a revision question into why
// this read cannot be confirmed: the peer's own cause (its reason and the
// hop it names) when it sent a Status, or the hop from here to the peer.
func notFreshFromPeer(self string, t target, shard string, gr schema.GroupResource, err error) *NotFresh {
	nf := &NotFresh{Reason: homes.ReasonHomeUnreachable, Home: t.home, Shard: shard, Resource: gr, Err: err, Hop: self + "->" + t.src.Name}
	var se *homes.PeerStatusError
	if !errors.As(err, &se) {
		return nf
	}
	var status metav1.Status
	if json.Unmarshal(se.Body, &status) != nil || status.Details == nil {
		return nf
	}
	for _, c := range status.Details.Causes {
		if c.Field != t.home || c.Type == "" {
			continue
		}
		nf.Reason = string(c.Type)
		msg := c.Message
		if rest, ok := strings.CutPrefix(msg, hopPrefix); ok {
			if hop, tail, found := strings.Cut(rest, ": "); found {
				nf.Hop, msg = hop, tail
			}
		}
		nf.Err = fmt.Errorf("through %q: %s", t.src.Name, msg)
		return nf
	}
	return nf
}

// pathContains reports whether a copy's path (kcpcache.AnnotationHomePath)
// names cache.
func pathContains(u *unstructured.Unstructured, cache string) bool {
	path := u.GetAnnotations()[kcpcache.AnnotationHomePath]
	return path != "" && slices.Contains(strings.Split(path, ","), cache)
}
