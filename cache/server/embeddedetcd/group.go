package embeddedetcd

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"

	"k8s.io/klog/v2"
)

// A group is several in-memory members of one cache, each in its own
// cache server, forming one etcd cluster: a write is acknowledged once a
// majority of the members has it, so every member holds every write, and a
// member that lost its memory (its server restarted) is refilled by the
// others.
//
// A member without data cannot come back under its old identity: raft
// counts on a member keeping what it acknowledged, and one that forgot it
// could help elect a leader that lacks acknowledged writes. So a restarted
// member joins as a new one: it asks a live member to remove its old entry
// and add it again (etcd's runtime reconfiguration), then starts with
// initial-cluster-state=existing and an empty directory, and the leader
// sends it a snapshot. Only when no member of the group runs a cluster
// (none answers, or those that answer are themselves starting one that
// never had a leader) does a member start a new cluster with the whole
// group, as etcd's static bootstrap: a majority must then come up within
// the start timeout.

const (
	// groupClusterToken keeps the group's member and cluster IDs apart
	// from those of other etcd clusters on the same peer URLs.
	groupClusterToken = "kcp-cache-memory-group"
	// groupProbeTimeout bounds each question to another member's peer
	// listener: a member that does not answer this fast counts as down.
	groupProbeTimeout = time.Second
	// groupReconfigureTimeout bounds removing and adding this member
	// through a live one.
	groupReconfigureTimeout = 5 * time.Second
	// groupRetryInterval is the pause between attempts to join: etcd
	// refuses to add a member until the one asked has been connected to
	// every other for five seconds (its strict reconfiguration check), and
	// a cluster without a leader cannot change its membership at all.
	groupRetryInterval = time.Second
	// groupNudgeInterval is how often a joining member has the running
	// group commit an entry (see Group.nudge).
	groupNudgeInterval = time.Second
	// clusterVersionNotDecided is what a member's /version says before its
	// cluster ever had a leader.
	clusterVersionNotDecided = "not_decided"
)

// Group makes an in-memory member one of several members of one cluster.
// Its traffic (peers, and the client URL through which others change the
// membership) is TLS with client certificates of the group's CA when TLS is
// set (GenerateGroupTLS), plain HTTP otherwise.
type Group struct {
	// Name is this member's; it must be one of Peers.
	Name string
	// Peers is the whole group, this member included.
	Peers []Peer
	// TLS is this member's identity in the group and the group's CA, for
	// its peer URL, its ClientURL and its requests to the others; nil: the
	// group speaks plain HTTP, without authentication.
	TLS *TLSFiles
	// ClientURL (https://host:port, http:// without TLS) is where this member serves the other
	// members' requests to change the membership. The member listens on
	// it (on every interface when the host is a name, not an address).
	ClientURL string
	// PeerListenURL is where the member listens for its peers when they
	// reach its peer URL (in Peers) through something in between; empty:
	// on its peer URL.
	PeerListenURL string
}

// Peer is a member of a group: its name and the URL of its peer listener.
type Peer struct {
	Name string
	URL  string
}

var (
	// errGroupMisconfigured ends a start that retrying cannot fix.
	errGroupMisconfigured = errors.New("memory group misconfigured")
	// errGroupJoin ends a start whose running group did not take the
	// member within the start timeout.
	errGroupJoin = errors.New("the running memory group did not take this member")
)

// Names lists the group's members by name.
func (g Group) Names() []string {
	names := make([]string, 0, len(g.Peers))
	for _, p := range g.Peers {
		names = append(names, p.Name)
	}
	return names
}

func (g Group) validate() error {
	if _, ok := g.self(); !ok {
		return fmt.Errorf("%w: member %q is not one of its peers", errGroupMisconfigured, g.Name)
	}
	scheme := g.scheme()
	for _, raw := range append([]string{g.ClientURL}, g.peerURLs()...) {
		if u, err := url.Parse(raw); err != nil || u.Scheme != scheme || u.Port() == "" {
			return fmt.Errorf("%w: %q is not an %s://host:port URL", errGroupMisconfigured, raw, scheme)
		}
	}
	return nil
}

// scheme is the scheme of the group's URLs: https with TLS.
func (g Group) scheme() string {
	if g.TLS != nil {
		return "https"
	}
	return "http"
}

// httpClient reaches the other members' listeners, with this member's
// certificate when the group speaks TLS.
func (g Group) httpClient() (*http.Client, error) {
	client := &http.Client{Timeout: groupProbeTimeout}
	if g.TLS != nil {
		cfg, err := g.TLS.ClientTLSConfig()
		if err != nil {
			return nil, err
		}
		client.Transport = &http.Transport{TLSClientConfig: cfg}
	}
	return client, nil
}

// Hosts names the hosts this member is reached at by the others: those of
// its peer URL and its ClientURL.
func (g Group) Hosts() []string {
	var hosts []string
	self, _ := g.self()
	for _, raw := range []string{self.URL, g.ClientURL} {
		if u, err := url.Parse(raw); err == nil && u.Hostname() != "" && !slices.Contains(hosts, u.Hostname()) {
			hosts = append(hosts, u.Hostname())
		}
	}
	return hosts
}

func (g Group) self() (Peer, bool) {
	for _, p := range g.Peers {
		if p.Name == g.Name {
			return p, true
		}
	}
	return Peer{}, false
}

func (g Group) peerURLs() []string {
	urls := make([]string, 0, len(g.Peers))
	for _, p := range g.Peers {
		urls = append(urls, p.URL)
	}
	return urls
}

func (g Group) initialCluster() string {
	pairs := make([]string, 0, len(g.Peers))
	for _, p := range g.Peers {
		pairs = append(pairs, p.Name+"="+p.URL)
	}
	return strings.Join(pairs, ",")
}

// configure makes ec a member of the group: named, on its peer URL, and
// serving the group on ClientURL next to the loopback client URL.
func (g Group) configure(ec *embed.Config) error {
	self, _ := g.self()
	peer, err := url.Parse(self.URL)
	if err != nil {
		return err
	}
	client, err := url.Parse(g.ClientURL)
	if err != nil {
		return err
	}
	listen := *peer
	if g.PeerListenURL != "" {
		u, err := url.Parse(g.PeerListenURL)
		if err != nil {
			return err
		}
		listen = *u
	}
	ec.Name = g.Name
	ec.ListenPeerUrls = []url.URL{listenURL(listen)}
	ec.AdvertisePeerUrls = []url.URL{*peer}
	ec.ListenClientUrls = append(ec.ListenClientUrls, listenURL(*client))
	// Others learn where to reach this member from the membership; the
	// loopback URL is for this server's own API server only.
	ec.AdvertiseClientUrls = []url.URL{*client}
	ec.InitialClusterToken = groupClusterToken
	ec.InitialCluster = g.initialCluster()
	return nil
}

// listenURL is u on the address it names, or on every interface when it
// names a host: etcd binds addresses only.
func listenURL(u url.URL) url.URL {
	if net.ParseIP(u.Hostname()) == nil {
		u.Host = net.JoinHostPort("0.0.0.0", u.Port())
	}
	return u
}

// launch starts the member as a new cluster or as a new member of the
// running one (see the top of this file), retrying until deadline while
// the group cannot take it yet. reset empties the member's directory
// between attempts.
func (g Group) launch(ctx context.Context, ec *embed.Config, deadline time.Time, reset func() error) (*embed.Etcd, error) {
	logger := klog.FromContext(ctx)
	for {
		state, initialCluster, endpoints, err := g.plan(ctx)
		if err == nil {
			ec.ClusterState, ec.InitialCluster = state, initialCluster
			logger.Info("Starting a member of the memory group", "member", g.Name, "clusterState", state, "initialCluster", initialCluster)
			stopNudging := func() {}
			if state == embed.ClusterStateFlagExisting {
				stopNudging = g.nudge(ctx, endpoints)
			}
			var e *embed.Etcd
			e, err = launch(ctx, ec, deadline)
			stopNudging()
			if err == nil {
				return e, nil
			}
			if state == embed.ClusterStateFlagNew {
				return nil, fmt.Errorf("starting the memory group anew (a majority of %s must start within the start timeout): %w; members not reachable: %s", g.initialCluster(), err, g.describeUnreachable(ctx))
			}
			if resetErr := reset(); resetErr != nil {
				return nil, resetErr
			}
		}
		if errors.Is(err, errGroupMisconfigured) {
			return nil, err
		}
		logger.Info("The memory group cannot take this member yet; retrying", "member", g.Name, "err", err)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(groupRetryInterval):
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%w: %w (if the group lost its majority, it cannot take members back: restart every member, and the group starts anew, empty)", errGroupJoin, err)
		}
	}
}

// plan decides how the member starts: as a new member of the running
// cluster (it is added here, initialCluster is the membership including
// it, and endpoints are the running members' client URLs), or as one of a
// new cluster.
func (g Group) plan(ctx context.Context) (state, initialCluster string, endpoints []string, err error) {
	answers, err := g.probe(ctx)
	if err != nil {
		return "", "", nil, err
	}
	running := false
	for _, a := range answers {
		if a.clusterVersion == clusterVersionNotDecided {
			continue
		}
		running = true
		for _, u := range a.clientURLs {
			if strings.HasPrefix(u, g.scheme()+"://") && !slices.Contains(endpoints, u) {
				endpoints = append(endpoints, u)
			}
		}
	}
	if !running {
		return embed.ClusterStateFlagNew, g.initialCluster(), nil, nil
	}
	if len(endpoints) == 0 {
		return "", "", nil, errors.New("members answer but none advertises a client URL yet")
	}
	initialCluster, err = g.rejoin(ctx, endpoints)
	if err != nil {
		return "", "", nil, err
	}
	return embed.ClusterStateFlagExisting, initialCluster, endpoints, nil
}

// nudge commits an entry in the running group every groupNudgeInterval
// until the returned stop is called (it returns once the nudging has
// ended), so that a joining member has an entry to apply after the
// snapshot it starts from.
//
// It works around etcd (v3.6, etcdserver/server.go and v3_server.go): a
// member that restores a snapshot moves its committed index to the
// snapshot's but leaves its applied index (the one requests are checked
// against) where it was, 0 for a new member, until it applies an entry
// after the snapshot; and it refuses every request, its own publication
// included, while the committed index is more than 5,000 above the
// applied one ("too many requests"). A group with a long history that
// writes nothing while the member joins (the member the shards write
// through is the one restarting) sends it a snapshot past index 5,000 and
// no entry after it: the member never becomes ready, its start times out,
// and the group, a member short, is one failure from losing its majority.
// The entry is a lease granted and revoked at once: it changes no key and
// no revision.
func (g Group) nudge(ctx context.Context, endpoints []string) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		cli, err := g.client(endpoints)
		if err != nil {
			return
		}
		defer func() { _ = cli.Close() }()
		ticker := time.NewTicker(groupNudgeInterval)
		defer ticker.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-ticker.C:
			}
			// Failures are the group's state (no leader yet), not this
			// member's: the next tick tries again.
			rctx, rcancel := context.WithTimeout(ctx, groupProbeTimeout)
			if lease, err := cli.Grant(rctx, 60); err == nil {
				_, _ = cli.Revoke(rctx, lease.ID)
			}
			rcancel()
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// peerAnswer is what a member's peer listener tells about its cluster.
type peerAnswer struct {
	peer Peer
	// clusterVersion is "not_decided" until the cluster had a leader.
	clusterVersion string
	// clientURLs are those of every member that has started.
	clientURLs []string
}

// probe asks every other member's peer listener, at once, about its
// cluster; members that do not answer are left out. Something answering at
// this member's own peer URL is an error: another process is this member.
func (g Group) probe(ctx context.Context) ([]peerAnswer, error) {
	client, err := g.httpClient()
	if err != nil {
		return nil, err
	}
	defer client.CloseIdleConnections()
	var mu sync.Mutex
	var answers []peerAnswer
	var self error
	var wg sync.WaitGroup
	for _, p := range g.Peers {
		wg.Go(func() {
			a, err := probePeer(ctx, client, p)
			if err != nil {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if p.Name == g.Name {
				self = fmt.Errorf("%w: an etcd member already answers at this member's peer URL %s", errGroupMisconfigured, p.URL)
				return
			}
			answers = append(answers, a)
		})
	}
	wg.Wait()
	return answers, self
}

func probePeer(ctx context.Context, client *http.Client, p Peer) (peerAnswer, error) {
	a := peerAnswer{peer: p}
	var versions struct {
		Cluster string `json:"etcdcluster"`
	}
	if err := getJSON(ctx, client, p.URL+"/version", &versions); err != nil {
		return a, err
	}
	a.clusterVersion = versions.Cluster
	var members []struct {
		ClientURLs []string `json:"clientURLs"`
	}
	if err := getJSON(ctx, client, p.URL+"/members", &members); err != nil {
		return a, err
	}
	for _, m := range members {
		a.clientURLs = append(a.clientURLs, m.ClientURLs...)
	}
	return a, nil
}

func getJSON(ctx context.Context, client *http.Client, u string, into any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(into)
}

// rejoin removes this member's old entry (same name, or same peer URL: an
// entry added by an attempt that never started has no name yet) through
// the running members at endpoints and adds it again. It returns the
// membership to start with, in etcd's initial-cluster form. Both steps
// need the cluster's leader; the addition also needs the member asked to
// be connected to every other (strict reconfiguration), so a group that
// just lost or regained a member refuses for a few seconds.
func (g Group) rejoin(ctx context.Context, endpoints []string) (string, error) {
	self, _ := g.self()
	ctx, cancel := context.WithTimeout(ctx, groupReconfigureTimeout)
	defer cancel()
	cli, err := g.client(endpoints)
	if err != nil {
		return "", err
	}
	defer func() { _ = cli.Close() }()
	list, err := cli.MemberList(ctx)
	if err != nil {
		return "", fmt.Errorf("listing the members: %w", err)
	}
	for _, m := range list.Members {
		if m.Name != g.Name && !slices.Contains(m.PeerURLs, self.URL) {
			continue
		}
		if _, err := cli.MemberRemove(ctx, m.ID); err != nil && !errors.Is(err, rpctypes.ErrMemberNotFound) {
			return "", fmt.Errorf("removing this member's old entry %x: %w", m.ID, err)
		}
		klog.FromContext(ctx).Info("Removed this member's old entry from the memory group", "member", g.Name, "oldID", fmt.Sprintf("%x", m.ID))
	}
	added, err := cli.MemberAdd(ctx, []string{self.URL})
	if err != nil {
		return "", fmt.Errorf("adding this member: %w", err)
	}
	// etcd checks that the starting member's initial cluster has exactly
	// the running membership's peer URLs; names are only local, so the
	// configured ones are used where known.
	names := map[string]string{}
	for _, p := range g.Peers {
		names[p.URL] = p.Name
	}
	var pairs []string
	for _, m := range added.Members {
		for _, u := range m.PeerURLs {
			name := names[u]
			switch {
			case m.ID == added.Member.ID:
				name = g.Name
			case name == "" && m.Name != "":
				name = m.Name
			case name == "":
				name = fmt.Sprintf("%x", m.ID)
			}
			pairs = append(pairs, name+"="+u)
		}
	}
	return strings.Join(pairs, ","), nil
}

// client reaches the running members at endpoints, with this member's
// certificate when the group speaks TLS.
func (g Group) client(endpoints []string) (*clientv3.Client, error) {
	var tlsConfig *tls.Config
	if g.TLS != nil {
		var err error
		if tlsConfig, err = g.TLS.ClientTLSConfig(); err != nil {
			return nil, err
		}
	}
	return NewClient(endpoints, tlsConfig, groupProbeTimeout)
}

// describeUnreachable names the other members whose peer listener does not
// answer now, as NAME (URL), so that an operator sees which servers of the
// group to start or to reach.
func (g Group) describeUnreachable(ctx context.Context) string {
	client, err := g.httpClient()
	if err != nil {
		return err.Error()
	}
	defer client.CloseIdleConnections()
	var mu sync.Mutex
	var names []string
	var wg sync.WaitGroup
	for _, p := range g.Peers {
		if p.Name == g.Name {
			continue
		}
		wg.Go(func() {
			var version struct{}
			if err := getJSON(ctx, client, p.URL+"/version", &version); err == nil {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			names = append(names, fmt.Sprintf("%s (%s)", p.Name, p.URL))
		})
	}
	wg.Wait()
	if len(names) == 0 {
		return "none (they answer, but no majority formed)"
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}
