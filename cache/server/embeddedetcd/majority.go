package embeddedetcd

import (
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/server/v3/etcdserver"
)

// majorityPollInterval is how often a member of a group records that it
// still knows a leader. The age a survivor reports is counted from the last
// such record, so it is never less than how long the member has been cut
// off, and at most this much more.
const majorityPollInterval = 100 * time.Millisecond

// Majority says whether this member of an in-memory group is part of a
// majority (knows a leader), and since when it is not. A member cut off
// from its majority still holds every write it applied before: it can
// serve them as stale reads, but it can neither commit a write nor confirm
// that its data is current (etcd's linearizable reads need the leader).
//
// A Majority is created with the configuration, before the member runs
// (the storage layers built from the configuration hold it), and follows
// the member once Start launched it; until then, and without a group, it
// reports a majority.
type Majority struct {
	// Members names the group's members, for messages.
	Members []string

	mu     sync.Mutex
	server *etcdserver.EtcdServer
	// lastLeader is when the member last knew a leader (unix nanoseconds).
	lastLeader atomic.Int64
	stop       chan struct{}
	done       chan struct{}
}

// NewMajority returns a Majority of a group of members, following nothing
// yet.
func NewMajority(members []string) *Majority {
	m := &Majority{Members: members}
	m.lastLeader.Store(time.Now().UnixNano())
	return m
}

// Lost reports whether the member has no leader (it cannot reach a
// majority), and since when at the latest it has had none.
func (m *Majority) Lost() (lost bool, since time.Time) {
	if m == nil {
		return false, time.Time{}
	}
	m.mu.Lock()
	s := m.server
	m.mu.Unlock()
	if s == nil || s.Leader() != 0 {
		return false, time.Time{}
	}
	return true, time.Unix(0, m.lastLeader.Load())
}

// follow starts recording when the member last knew a leader, until
// unfollow. Start calls it once the member runs; Server.Close ends it.
func (m *Majority) follow(s *etcdserver.EtcdServer) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.server, m.stop, m.done = s, make(chan struct{}), make(chan struct{})
	m.lastLeader.Store(time.Now().UnixNano())
	go func(stop <-chan struct{}, done chan<- struct{}) {
		defer close(done)
		t := time.NewTicker(majorityPollInterval)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case now := <-t.C:
				if s.Leader() != 0 {
					m.lastLeader.Store(now.UnixNano())
				}
			}
		}
	}(m.stop, m.done)
}

// unfollow stops following the member; the Majority reports a majority
// again (there is no member to be cut off).
func (m *Majority) unfollow() {
	m.mu.Lock()
	stop, done := m.stop, m.done
	m.server, m.stop, m.done = nil, nil, nil
	m.mu.Unlock()
	if stop != nil {
		close(stop)
		<-done
	}
}
