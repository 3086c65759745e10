package mirror

import (
	"context"
	"net/http"
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// A stale read's kcpcache.HomeRevisionHeader comes from the streams' state:
// writes the mirror applied to the local etcd. The read itself is served by
// the watch cache, which may not have seen the last of those writes yet,
// and may meanwhile see writes the streams apply after the header was
// taken. The header is exact, the copy holds every change of the partition
// at its home up to the revision and none after it, because:
//   - the read holds every covering stream's applyMu (holdStreams) from
//     taking the header's entries until its local revision is fixed, so no
//     stream applies a change in between;
//   - that local revision covers every write the entries count (taken from
//     the local etcd after them), and the read is served at it: a GET at
//     "not older than" it while the streams are still held (the watch
//     cache waits until it has it, normally at once, and nothing of these
//     streams can land after it before the GET is answered); a LIST, which
//     may take long to encode, at exactly it (resourceVersionMatch=Exact,
//     from the watch cache's snapshots or etcd), so the streams are let go
//     as soon as the revision is fixed.

//
// A stale read without a header entry (a partition held, being relisted,
// or relayed without its home's revision) is served the same way, at a
// local revision fixed while the streams are held: what it reflects has no
// revision to name, but it never falls between the two writes of a copy's
// replacement (apply.go, replaceCopy), where the name is absent.

// holdStreams holds, for reading, applyMu of every stream whose data a read
// of shard's gr covers, and returns the function that lets them go, and
// how many it holds.
func (m *Mirror) holdStreams(shard string, gr schema.GroupResource) (release func(), n int) {
	targets, _ := m.targetsOf(shard)
	var held []*stream
	seen := map[*stream]bool{}
	for _, t := range targets {
		for _, c := range t.src.streamsFor(gr) {
			if seen[c.s] {
				// Two homes through one peer: one stream, held once.
				continue
			}
			seen[c.s] = true
			c.s.applyMu.RLock()
			held = append(held, c.s)
		}
	}
	return func() {
		for _, s := range held {
			s.applyMu.RUnlock()
		}
	}, len(held)
}

// StorageRevision returns the local storage's current revision.
type StorageRevision func(ctx context.Context) (int64, error)

// PartitionRevision returns the revision of the last change to shard's
// objects of gr in the local storage (shard kcpcache.Wildcard: any
// shard's), covering every write acknowledged before the call.
type PartitionRevision func(ctx context.Context, shard string, gr schema.GroupResource) (int64, error)

// coveringRevision returns a local revision at least as new as every write
// applied when the header's entries were taken (call it after taking them).
// The revision is cached per stream state, so that reads while nothing is
// mirrored cost no round trip to etcd.
func (m *Mirror) coveringRevision(ctx context.Context, current StorageRevision) (int64, error) {
	v := m.stateVersion.Load()
	m.localRevMu.Lock()
	if m.localRevAt >= v && m.localRev > 0 {
		rev := m.localRev
		m.localRevMu.Unlock()
		return rev, nil
	}
	m.localRevMu.Unlock()
	rev, err := current(ctx)
	if err != nil {
		return 0, err
	}
	m.localRevMu.Lock()
	if v >= m.localRevAt {
		m.localRevAt, m.localRev = v, rev
	}
	m.localRevMu.Unlock()
	return rev, nil
}

// serveAt rewrites a stale read to be served at local revision rev: not
// older than it, or exactly at it (exact). It reports false when the read
// is not served at rev: it asks for an exact match of its own, or for a
// revision newer than rev.
func serveAt(req *http.Request, rev int64, exact bool) bool {
	q := req.URL.Query()
	switch metav1.ResourceVersionMatch(q.Get("resourceVersionMatch")) {
	case "", metav1.ResourceVersionMatchNotOlderThan:
	default:
		return false
	}
	if asked, err := strconv.ParseInt(q.Get("resourceVersion"), 10, 64); err == nil && asked > rev {
		return false
	}
	q.Set("resourceVersion", strconv.FormatInt(rev, 10))
	if exact {
		q.Set("resourceVersionMatch", string(metav1.ResourceVersionMatchExact))
	}
	req.URL.RawQuery = q.Encode()
	return true
}
