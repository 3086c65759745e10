package mirror

import (
	"context"
	"net/http"
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A stale read's kcpcache.HomeRevisionHeader comes from the streams' state:
// writes the mirror applied to the local etcd. The read itself is served by
// the watch cache, which may not have seen the last of those writes yet; a
// header taken as is could promise more than the answer holds. So once the
// header's entries are taken, the read is served at a local revision that
// covers every write they count (resourceVersion "not older than" it: the
// watch cache waits until it has it, normally at once).

// LocalRevision returns the local storage's current revision.
type LocalRevision func(ctx context.Context) (int64, error)

// coveringRevision returns a local revision at least as new as every write
// applied when the header's entries were taken (call it after taking them).
// The revision is cached per stream state, so that reads while nothing is
// mirrored cost no round trip to etcd.
func (m *Mirror) coveringRevision(ctx context.Context, current LocalRevision) (int64, error) {
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

// serveNotOlderThan rewrites a stale read's resourceVersion to at least rev.
// It reports false for a read it must not rewrite (an exact match).
func serveNotOlderThan(req *http.Request, rev int64) bool {
	q := req.URL.Query()
	switch metav1.ResourceVersionMatch(q.Get("resourceVersionMatch")) {
	case "", metav1.ResourceVersionMatchNotOlderThan:
	default:
		return false
	}
	if asked, err := strconv.ParseInt(q.Get("resourceVersion"), 10, 64); err == nil && asked >= rev {
		return true
	}
	q.Set("resourceVersion", strconv.FormatInt(rev, 10))
	req.URL.RawQuery = q.Encode()
	return true
}
