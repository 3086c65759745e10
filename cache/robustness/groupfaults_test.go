package robustness

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/client"
	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
	"github.com/kcp-cache/kcp-cache/cache/server/embeddedetcd/etcdtest"
)

// groupMember is one member of the memory-group shape, as its faults see
// it.
type groupMember struct {
	name string
	// proxy is where the traffic reads the partition at this member, and
	// where a fault's probes read it: a seeded fault there is seen by both.
	proxy *Proxy
	// proc is the member's child process.
	proc *cachetest.MemberProcess
	// etcd reaches this member's etcd alone: a leadership transfer must be
	// asked of the leader.
	etcd *clientv3.Client
}

// group is the memory-group shape's members and what its faults share.
type group struct {
	*cachetest.MemoryGroup
	members []*groupMember
	// etcd reaches every member.
	etcd  *clientv3.Client
	shard string
	// long: the run is longer than CI's; faults then last long enough to
	// outlast the clients' timeouts.
	long bool
	// found collects what a fault's own checks find.
	found func(Violation)
	// onPause, when set, is called with the member a pause fault is about
	// to pause (the seeded faults' test switches a fault on there).
	onPause func(*groupMember)
}

// findings are the violations the faults' own checks find while traffic
// runs; the run's report holds them.
type findings struct {
	mu sync.Mutex
	vs []Violation
}

func (f *findings) add(v Violation) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.vs = append(f.vs, v)
}

func (f *findings) take() []Violation {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := f.vs
	f.vs = nil
	return out
}

// memberProxy is a proxy forwarding to cfg's server with cfg's identity
// (a member's admin config, a shard's at its home): the traffic's requests
// there go through it, and a seeded fault in it is seen by them.
func memberProxy(t *testing.T, cfg *rest.Config) *Proxy {
	t.Helper()
	transport, err := rest.TransportFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	target, err := url.Parse(cfg.Host)
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := NewProxy(target, transport)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	return proxy
}

// proxiedReader reads shard's partition through proxy, its answers watched
// by answers.
func proxiedReader(t *testing.T, proxy *Proxy, shard string, answers *Answers) dynamic.ResourceInterface {
	t.Helper()
	cfg := &rest.Config{Host: proxy.URL + kcpcache.ScopedPathPrefix(kcpcache.Scope{Shard: shard, Cluster: "root"}), WrapTransport: answers.Wrap}
	d, err := dynamic.NewForConfig(AskBookkeeping(client.Unthrottled(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	return d.Resource(Resource)
}

// memberProbe is what one read of the partition at a member answered.
type memberProbe struct {
	code    int
	message string
	age     string
	// homeRevision is the answer's kcpcache.HomeRevisionHeader: the
	// home revisions a 200 says it reflects.
	homeRevision string
	err          error
}

func (p memberProbe) String() string {
	if p.err != nil {
		return p.err.Error()
	}
	s := strconv.Itoa(p.code)
	if p.message != "" {
		s += " " + p.message
	}
	if p.age != "" {
		s += ", " + kcpcache.FreshnessAgeHeader + ": " + p.age
	}
	if p.homeRevision != "" {
		s += ", " + kcpcache.HomeRevisionHeader + ": " + p.homeRevision
	}
	return s
}

// probe lists the partition at m through its proxy: consistently, or with
// resourceVersion=0 (stale) from the member's watch cache.
func (g *group) probe(ctx context.Context, m *groupMember, stale bool) memberProbe {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	u := m.proxy.URL + kcpcache.ScopedPathPrefix(kcpcache.Scope{Shard: g.shard, Cluster: "root"}) + "/apis/" + Resource.Group + "/" + Resource.Version + "/" + Resource.Resource
	if stale {
		u += "?resourceVersion=0"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return memberProbe{err: err}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return memberProbe{err: err}
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxStatusBytes))
	p := memberProbe{code: resp.StatusCode, age: resp.Header.Get(kcpcache.FreshnessAgeHeader)}
	if resp.StatusCode != http.StatusOK {
		var status struct {
			Message string `json:"message"`
		}
		if json.Unmarshal(body, &status) == nil {
			p.message = status.Message
		}
	}
	return p
}

// cutOff says whether consistent and stale (resourceVersion=0) are what a
// member cut off from its majority answers: 503 naming the majority, and
// 200 with its age.
func cutOff(m *groupMember, consistent, stale memberProbe) error {
	if consistent.err != nil || consistent.code != http.StatusServiceUnavailable || !strings.Contains(consistent.message, "majority") {
		return fmt.Errorf("a consistent read at %s answered %s, want 503 naming the lost majority", m.name, consistent)
	}
	if stale.err != nil || stale.code != http.StatusOK || !strings.HasPrefix(stale.age, m.name+"=") {
		return fmt.Errorf("a resourceVersion=0 read at %s answered %s, want 200 with %s %s=<seconds>", m.name, stale, kcpcache.FreshnessAgeHeader, m.name)
	}
	return nil
}

// waitFor polls check until it holds or until within has passed; it
// returns the last failure.
func waitFor(ctx context.Context, within time.Duration, check func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	for {
		err := check(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// hold lasts d (the length of a fault: how long a member stays paused or
// a partition stays cut), whatever the run's context does: a fault under
// way when the traffic ends is still undone.
func hold(d time.Duration) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	<-timer.C
}

// partitionOf cuts each member isolated off from every other (one member:
// a minority cut; two or more of three: every link cut, no majority
// anywhere), checks that a member without a majority refuses what needs it
// (503 naming the majority) and serves stale reads with its age, and that
// the members that hold a majority serve consistent reads; then heals the
// group and checks that it is whole again.
func (g *group) partitionOf(what string, isolated ...string) fault {
	return func(runCtx context.Context, _ *testing.T, note func(string)) {
		// A fault begun is carried through, and its checks with it, even
		// when the traffic ends meanwhile.
		ctx := context.WithoutCancel(runCtx)
		// Each fault happens on its own: in a group that is not whole
		// (a member still refilling), a cut would take the majority
		// from both sides, which is no longer this fault.
		if err := groupWhole(ctx, g.etcd, g.ClientURLs); err != nil {
			note(fmt.Sprintf("%s skipped: the group is not whole: %v", what, err))
			return
		}
		in := map[string]bool{}
		for _, n := range isolated {
			in[n] = true
		}
		var minority, majority []*groupMember
		for _, m := range g.members {
			// The members not isolated stay together: a majority
			// when they are more than half.
			if in[m.name] || 2*(len(g.members)-len(isolated)) <= len(g.members) {
				minority = append(minority, m)
			} else {
				majority = append(majority, m)
			}
		}
		// Every member serves a consistent read before the cut (and
		// its proxy has seen the answer).
		for _, m := range g.members {
			if err := waitFor(ctx, 20*time.Second, func(ctx context.Context) error {
				if p := g.probe(ctx, m, false); p.err != nil || p.code != http.StatusOK {
					return fmt.Errorf("a consistent read at %s answered %s", m.name, p)
				}
				return nil
			}); err != nil {
				note(fmt.Sprintf("%s skipped: %v", what, err))
				return
			}
		}
		note(fmt.Sprintf("%s: %s each cut off from every other member", what, strings.Join(isolated, ", ")))
		for _, n := range isolated {
			g.Links.Isolate(n)
		}
		cut := time.Now()
		// Within 20 s: raft's election timeout and the member's own
		// check of its leader, on a loaded machine.
		for _, m := range minority {
			if err := waitFor(ctx, 20*time.Second, func(ctx context.Context) error {
				return cutOff(m, g.probe(ctx, m, false), g.probe(ctx, m, true))
			}); err != nil {
				g.found(Violation{Check: "partition-minority", Details: fmt.Sprintf("%s, %s after the cut: %v", what, time.Since(cut).Round(time.Millisecond), err)})
			}
		}
		for _, m := range majority {
			if err := waitFor(ctx, 20*time.Second, func(ctx context.Context) error {
				if p := g.probe(ctx, m, false); p.err != nil || p.code != http.StatusOK {
					return fmt.Errorf("a consistent read at %s answered %s, want 200: its side holds the majority", m.name, p)
				}
				return nil
			}); err != nil {
				g.found(Violation{Check: "partition-majority", Details: fmt.Sprintf("%s: %v", what, err)})
			}
		}
		if g.long {
			// The traffic runs against the divided group for a while.
			hold(5 * time.Second)
		}
		g.Links.Heal()
		note(fmt.Sprintf("%s healed after %s", what, time.Since(cut).Round(time.Millisecond)))
		if err := groupWhole(ctx, g.etcd, g.ClientURLs); err != nil {
			g.found(Violation{Check: "partition-heal", Details: fmt.Sprintf("%s: the group is not whole a minute after the heal: %v", what, err)})
		}
	}
}

// pauseOf pauses a member with SIGSTOP and continues it: the leader
// (leadership moved there first), a follower, or the member named. Its
// connections stay open and it answers nothing meanwhile. The others must
// go on with a leader among themselves, and the member must serve again
// once continued.
func (g *group) pauseOf(role string) fault {
	next := 0
	return func(runCtx context.Context, _ *testing.T, note func(string)) {
		// A fault begun is carried through, and its checks with it, even
		// when the traffic ends meanwhile.
		ctx := context.WithoutCancel(runCtx)
		what := map[string]string{"leader": "the leader", "follower": "a follower"}[role]
		if what == "" {
			what = role
		}
		if err := groupWhole(ctx, g.etcd, g.ClientURLs); err != nil {
			note(fmt.Sprintf("pause of %s skipped: the group is not whole: %v", what, err))
			return
		}
		ids, leaderName, err := g.leadership(ctx)
		if err != nil {
			note(fmt.Sprintf("pause of %s skipped: %v", what, err))
			return
		}
		// The leader: the members in turn; a follower: the next one
		// that is not the leader.
		var target *groupMember
		for i := range g.members {
			m := g.members[(next+i)%len(g.members)]
			if role == "leader" || (role == "follower" && m.name != leaderName) || m.name == role {
				target = m
				break
			}
		}
		next++
		leader := role == "leader"
		switch {
		case role == target.name && target.name == leaderName:
			what = "the leader"
		case role == target.name:
			what = "a follower"
		}
		if leader && leaderName != target.name {
			if err := g.moveLeader(ctx, leaderName, target.name, ids); err != nil {
				note(fmt.Sprintf("pause of the leader skipped: %v", err))
				return
			}
		}
		length := 4 * time.Second
		if g.long {
			// Longer than the clients' own timeout (requestTimeout): a
			// request to the paused member ends while it is paused.
			length = requestTimeout + 2*time.Second
		}
		if g.onPause != nil {
			g.onPause(target)
		}
		note(fmt.Sprintf("SIGSTOP of %s (%s) for %s", target.name, what, length))
		if err := target.proc.Pause(); err != nil {
			g.found(Violation{Check: "pause", Details: err.Error()})
			return
		}
		paused := time.Now()
		// The others hold the majority: they have (or elect) a leader
		// among themselves.
		if err := waitFor(ctx, min(length, 10*time.Second), func(ctx context.Context) error {
			for _, m := range g.members {
				if m == target {
					continue
				}
				st, err := m.etcd.Status(ctx, m.etcd.Endpoints()[0])
				if err != nil {
					return fmt.Errorf("status of %s: %w", m.name, err)
				}
				if st.Leader == 0 {
					return fmt.Errorf("%s follows no leader", m.name)
				}
				if st.Leader == ids[target.name] {
					return fmt.Errorf("%s still follows the paused member %s", m.name, target.name)
				}
			}
			return nil
		}); err != nil {
			g.found(Violation{Check: "pause-leader", Details: fmt.Sprintf("no leader among the others while %s was paused: %v", target.name, err)})
		}
		hold(length - time.Since(paused))
		if err := target.proc.Continue(); err != nil {
			g.found(Violation{Check: "pause", Details: err.Error()})
			return
		}
		note(fmt.Sprintf("SIGCONT of %s after %s", target.name, time.Since(paused).Round(time.Millisecond)))
		// Continued, it serves consistent reads again once it has caught
		// up with the leader.
		if err := waitFor(ctx, 30*time.Second, func(ctx context.Context) error {
			if p := g.probe(ctx, target, false); p.err != nil || p.code != http.StatusOK {
				return fmt.Errorf("a consistent read at %s answered %s", target.name, p)
			}
			return nil
		}); err != nil {
			g.found(Violation{Check: "pause-return", Details: fmt.Sprintf("30 s after SIGCONT: %v", err)})
		}
	}
}

// leadership is every member's ID by name and the leader's name.
func (g *group) leadership(ctx context.Context) (map[string]uint64, string, error) {
	list, err := g.etcd.MemberList(ctx)
	if err != nil {
		return nil, "", err
	}
	ids := map[string]uint64{}
	names := map[uint64]string{}
	for _, m := range list.Members {
		ids[m.Name], names[m.ID] = m.ID, m.Name
	}
	st, err := g.etcd.Status(ctx, g.ClientURLs[0])
	if err != nil {
		return nil, "", err
	}
	leader, ok := names[st.Leader]
	if !ok {
		return nil, "", fmt.Errorf("the leader %x is no member", st.Leader)
	}
	return ids, leader, nil
}

// moveLeader asks the leader to hand its leadership to to, and waits until
// the group follows it.
func (g *group) moveLeader(ctx context.Context, from, to string, ids map[string]uint64) error {
	var leader *groupMember
	for _, m := range g.members {
		if m.name == from {
			leader = m
		}
	}
	if _, err := leader.etcd.MoveLeader(ctx, ids[to]); err != nil {
		return fmt.Errorf("moving the leadership from %s to %s: %w", from, to, err)
	}
	return waitFor(ctx, 10*time.Second, func(ctx context.Context) error {
		_, now, err := g.leadership(ctx)
		if err == nil && now != to {
			err = fmt.Errorf("the leader is %s, not %s", now, to)
		}
		return err
	})
}

// restartOfMember restarts member process m with its memory gone, once
// the group is whole again, as an operator's rolling restart does.
func (g *group) restartOfMember(m *groupMember) fault {
	return func(ctx context.Context, t *testing.T, note func(string)) {
		if err := groupWhole(ctx, g.etcd, g.ClientURLs); err != nil {
			note(fmt.Sprintf("restart of %s skipped: the group is not whole: %v", m.name, err))
			return
		}
		note("restart of member " + m.name + " (its memory lost)")
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cachetest.DefaultTimeout)
		defer cancel()
		if err := m.proc.Restart(rctx); err != nil {
			t.Errorf("restarting %s: %v", m.name, err)
		}
	}
}

// dialMember is a client of one member's etcd alone.
func dialMember(t *testing.T, g *cachetest.MemoryGroup, i int) *clientv3.Client {
	t.Helper()
	return etcdtest.Dial(t, g.EtcdClientTLS(t), g.ClientURLs[i])
}
