package embeddedetcd

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kcp-cache/kcp-cache/cache/server/ports"
)

// testGroup is the configuration of a group of n in-memory members on
// loopback, each with its own configured directory.
func testGroup(t *testing.T, n int) []Config {
	t.Helper()
	var peers []Peer
	clientURLs := make([]string, n)
	for i := range n {
		peerPort, err := ports.Reserve()
		if err != nil {
			t.Fatal(err)
		}
		clientPort, err := ports.Reserve()
		if err != nil {
			t.Fatal(err)
		}
		peers = append(peers, Peer{Name: fmt.Sprintf("m%d", i), URL: fmt.Sprintf("http://127.0.0.1:%d", peerPort)})
		clientURLs[i] = fmt.Sprintf("http://127.0.0.1:%d", clientPort)
	}
	root := t.TempDir()
	cfgs := make([]Config, n)
	for i := range n {
		cfgs[i] = Config{
			InMemory:            true,
			Directory:           filepath.Join(root, peers[i].Name),
			Group:               &Group{Name: peers[i].Name, Peers: peers, ClientURL: clientURLs[i]},
			MaintenanceInterval: -1,
			StartTimeout:        30 * time.Second,
		}
	}
	return cfgs
}

// startGroup starts every member at once, as a new group starts.
func startGroup(ctx context.Context, t *testing.T, cfgs []Config) []*Server {
	t.Helper()
	members := make([]*Server, len(cfgs))
	errs := make([]error, len(cfgs))
	var wg sync.WaitGroup
	for i, cfg := range cfgs {
		wg.Go(func() { members[i], errs[i] = Start(ctx, cfg) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("member %d: %v", i, err)
		}
		t.Cleanup(members[i].Close)
	}
	return members
}

func plainClient(t *testing.T, cfg Config) *clientv3.Client {
	t.Helper()
	return clientFor(t, nil, cfg.Group.ClientURL)
}

// A member of a group that restarts (its memory gone) joins the running
// cluster again and holds every key the others hold, in the same cluster;
// when every member restarts, the group is new and empty.
func TestGroupMemberRejoinsWithEveryKey(t *testing.T) {
	if testing.Short() {
		t.Skip("long scenario (a group of three, a member rejoining after a snapshot): skipped with -short")
	}
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfgs := testGroup(t, 3)
	members := startGroup(ctx, t, cfgs)
	cluster := members[0].ClusterID()
	for i, m := range members {
		if m.ClusterID() != cluster {
			t.Fatalf("member %d is in cluster %s, member 0 in %s", i, m.ClusterID(), cluster)
		}
	}
	put := func(c *clientv3.Client, prefix string, n int) {
		t.Helper()
		for i := range n {
			if _, err := c.Put(ctx, fmt.Sprintf("%s/%04d", prefix, i), "v"); err != nil {
				t.Fatal(err)
			}
		}
	}
	put(plainClient(t, cfgs[0]), "before", 100)

	members[2].Close()
	// More writes than a follower may catch up on from the log: the
	// restarted member needs a snapshot.
	put(plainClient(t, cfgs[1]), "while-down", snapshotCount+snapshotCatchUpEntries+100)

	start := time.Now()
	restarted, err := Start(ctx, cfgs[2])
	if err != nil {
		t.Fatalf("restarting member 2: %v", err)
	}
	t.Cleanup(restarted.Close)
	t.Logf("member 2 rejoined in %s", time.Since(start).Round(time.Millisecond))
	if restarted.ClusterID() != cluster {
		t.Errorf("restarted member is in cluster %s, want the group's %s", restarted.ClusterID(), cluster)
	}
	// A linearizable read through the restarted member alone.
	resp, err := plainClient(t, cfgs[2]).Get(ctx, "", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(100 + snapshotCount + snapshotCatchUpEntries + 100); resp.Count != want {
		t.Errorf("the restarted member holds %d keys, want %d", resp.Count, want)
	}
	list, err := plainClient(t, cfgs[0]).MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Members) != 3 {
		t.Errorf("the group has %d members after the rejoin, want 3: %v", len(list.Members), list.Members)
	}

	for _, m := range []*Server{members[0], members[1], restarted} {
		m.Close()
	}
	again := startGroup(ctx, t, cfgs)
	resp, err = plainClient(t, cfgs[0]).Get(ctx, "", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	if resp.Count != 0 {
		t.Errorf("a group restarted as a whole holds %d keys, want none", resp.Count)
	}
	_ = again
}

// Two members of three that restart while the third runs cannot rejoin:
// the survivor alone has no majority to change the membership with, and
// they must not start a new cluster beside it. They give up at the start
// timeout, saying why.
func TestGroupWithoutMajorityRefusesToRejoin(t *testing.T) {
	if testing.Short() {
		t.Skip("long scenario (waits for a start timeout): skipped with -short")
	}
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfgs := testGroup(t, 3)
	members := startGroup(ctx, t, cfgs)
	members[1].Close()
	members[2].Close()
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i, cfg := range cfgs[1:] {
		cfg.StartTimeout = 3 * time.Second
		wg.Go(func() {
			var m *Server
			if m, errs[i] = Start(ctx, cfg); m != nil {
				m.Close()
			}
		})
	}
	wg.Wait()
	for i, err := range errs {
		if !errors.Is(err, errGroupJoin) || !strings.Contains(err.Error(), "lost its majority") {
			t.Errorf("member %d restarted beside a survivor without a majority: %v", i+1, err)
		}
	}
}

// A rolling restart, one member after the other as soon as the previous
// one is back, keeps every key: each rejoins a group that has just
// changed its membership (etcd then refuses another change for a few
// seconds, and the member retries).
func TestGroupSurvivesARollingRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("long scenario (a group of three members restarted one by one): skipped with -short")
	}
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfgs := testGroup(t, 3)
	members := startGroup(ctx, t, cfgs)
	for i := range 3 {
		if _, err := plainClient(t, cfgs[(i+1)%3]).Put(ctx, fmt.Sprintf("key-%d", i), "v"); err != nil {
			t.Fatal(err)
		}
		members[i].Close()
		start := time.Now()
		var err error
		if members[i], err = Start(ctx, cfgs[i]); err != nil {
			t.Fatalf("restarting member %d: %v", i, err)
		}
		t.Cleanup(members[i].Close)
		t.Logf("member %d rejoined in %s", i, time.Since(start).Round(time.Millisecond))
		resp, err := plainClient(t, cfgs[i]).Get(ctx, "key-", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		if resp.Count != int64(i+1) {
			t.Errorf("member %d holds %d keys after its restart, want %d", i, resp.Count, i+1)
		}
	}
}

// A member started alone in a group of three cannot reach a majority: its
// start returns an error by the start timeout (plus the time to stop the
// member), naming the members it could not reach, instead of waiting.
func TestGroupMemberAloneFailsFast(t *testing.T) {
	cfgs := testGroup(t, 3)
	cfg := cfgs[0]
	cfg.StartTimeout = 5 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	begin := time.Now()
	s, err := Start(ctx, cfg)
	took := time.Since(begin)
	if err == nil {
		s.Close()
		t.Fatal("a member alone in a group of three started")
	}
	t.Logf("start failed after %s: %v", took, err)
	// Generous for a loaded machine: the bound is the start timeout plus
	// stopping the member, far below "never".
	if took > 40*time.Second {
		t.Errorf("start took %s to fail; want about the start timeout (%s)", took, cfg.StartTimeout)
	}
	for _, other := range cfgs[1:] {
		self, _ := other.Group.self()
		if !strings.Contains(err.Error(), "not reachable: ") {
			t.Fatalf("error does not list the members not reachable: %v", err)
		}
		if want := fmt.Sprintf("%s (%s)", self.Name, self.URL); !strings.Contains(err.Error(), want) {
			t.Errorf("error does not name unreachable member %q: %v", want, err)
		}
	}
}
