package cachetest

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"k8s.io/klog/v2"

	"github.com/kcp-cache/kcp-cache/cache/options"
	"github.com/kcp-cache/kcp-cache/cache/server/embeddedetcd"
	"github.com/kcp-cache/kcp-cache/cache/server/pki"
	"github.com/kcp-cache/kcp-cache/cache/server/ports"
)

// OwnEmbeddedEtcd makes the server start its own embedded etcd, on free
// ports, instead of the fixture's.
func OwnEmbeddedEtcd(more func(*options.Options)) Option {
	return WithFlags(func(o *options.Options) {
		ownEmbeddedEtcd(o)
		if more != nil {
			more(o)
		}
	})
}

// ownEmbeddedEtcd sets o for a server that starts its own embedded etcd,
// in <root>/etcd-server unless o says otherwise, on free ports.
func ownEmbeddedEtcd(o *options.Options) {
	t := &o.Etcd.StorageConfig.Transport
	t.ServerList, t.TrustedCAFile, t.CertFile, t.KeyFile = nil, "", "", ""
	o.EmbeddedEtcd.ClientPort, o.EmbeddedEtcd.PeerPort = 0, 0
}

// StartMemoryGroup starts n --storage=memory servers of one group on
// loopback, all at once: a new group needs a majority of its members up
// within the start timeout.
// It returns the servers and the URLs at which their members serve the
// group (TLS with the group's certificates).
func StartMemoryGroup(t testing.TB, n int) ([]*Server, []string) {
	t.Helper()
	servers, _, clientURLs := StartMemoryGroupWithProcesses(t, n, 0)
	return servers, clientURLs
}

// StartMemoryGroupWithProcesses is StartMemoryGroup with the last processes
// of the n members each in a child process of the test binary, whose
// TestMain calls RunMemberIfAsked: a test can kill those as a crash does.
// It returns the servers running here (m0, m1, ...), the member processes
// (the members after them), and every member's client URL.
func StartMemoryGroupWithProcesses(t testing.TB, n, processes int) ([]*Server, []*MemberProcess, []string) {
	t.Helper()
	g := StartMemoryGroupWith(t, GroupOptions{Members: n, Processes: processes})
	return g.Servers, g.Processes, g.ClientURLs
}

// GroupOptions say what StartMemoryGroupWith starts.
type GroupOptions struct {
	// Members is the group's size.
	Members int
	// Processes is how many of the last members run in child processes of
	// the test binary, whose TestMain calls RunMemberIfAsked: a test can
	// kill, pause and restart those.
	Processes int
	// Links puts GroupLinks between the members, so that a test can cut
	// the group in parts.
	Links bool
}

// MemoryGroup is a group StartMemoryGroupWith started.
type MemoryGroup struct {
	// Servers are the members running in this process: m0, m1, ...
	Servers []*Server
	// Processes are the members in child processes, after Servers.
	Processes []*MemberProcess
	// ClientURLs are every member's client URL, in order.
	ClientURLs []string
	// Links stand between the members; nil without GroupOptions.Links.
	Links *GroupLinks

	secret []byte
}

// EtcdClientTLS is an identity in the group, derived from its secret as a
// member's is: a client with it reaches every member's ClientURLs.
func (g *MemoryGroup) EtcdClientTLS(t testing.TB) *tls.Config {
	t.Helper()
	files, err := embeddedetcd.GenerateGroupTLS(t.TempDir(), g.secret, "test-client", nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := files.ClientTLSConfig()
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// StartMemoryGroupWith starts a --storage=memory group on loopback as o
// says, all members at once (a new group needs a majority of its members
// up within the start timeout), and stops it when the test ends.
func StartMemoryGroupWith(t testing.TB, o GroupOptions) *MemoryGroup {
	t.Helper()
	n := o.Members
	members := make([]memberSpec, n)
	var peers []string
	g := &MemoryGroup{}
	if o.Links {
		names := make([]string, n)
		for i := range n {
			names[i] = fmt.Sprintf("m%d", i)
		}
		g.Links = newGroupLinks(names)
	}
	reserve := func() int {
		port, err := ports.Reserve()
		if err != nil {
			t.Fatal(err)
		}
		return port
	}
	for i := range n {
		peerURL := fmt.Sprintf("https://127.0.0.1:%d", reserve())
		peers = append(peers, fmt.Sprintf("m%d=%s", i, peerURL))
		members[i] = memberSpec{Name: fmt.Sprintf("m%d", i), ClientURL: fmt.Sprintf("https://127.0.0.1:%d", reserve())}
		if o.Links {
			members[i].PeerListenURL = fmt.Sprintf("https://127.0.0.1:%d", reserve())
		}
	}
	// The group's secret, as an operator hands it to every server: the
	// group speaks TLS with certificates derived from it.
	secretFile := filepath.Join(t.TempDir(), "group-secret")
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(secretFile, secret, 0o600); err != nil {
		t.Fatal(err)
	}
	g.secret = secret
	g.ClientURLs = make([]string, n)
	for i := range members {
		members[i].Peers, members[i].SecretFile = peers, secretFile
		g.ClientURLs[i] = members[i].ClientURL
	}
	if o.Links {
		// The links' own identity in the group, derived from the secret
		// as a member's is; its name is no member's.
		certs, err := embeddedetcd.GenerateGroupTLS(t.TempDir(), secret, "links", nil)
		if err != nil {
			t.Fatal(err)
		}
		for i, m := range members {
			_, advertised, _ := strings.Cut(peers[i], "=")
			listen, err := url.Parse(advertised)
			if err != nil {
				t.Fatal(err)
			}
			target, err := url.Parse(m.PeerListenURL)
			if err != nil {
				t.Fatal(err)
			}
			g.Links.serve(t, m.Name, listen, target, certs)
		}
	}
	here := n - o.Processes
	procsReady := func(context.Context) error { return nil }
	if o.Processes > 0 {
		// The member processes trust a CA of this process: its tests
		// issue identities for them (MemberProcess.ShardConfig).
		clientCA, err := pki.NewCA("cachetest-member-clients")
		if err != nil {
			t.Fatal(err)
		}
		caFile := filepath.Join(t.TempDir(), "client-ca.crt")
		if err := pki.WriteFile(caFile, clientCA.CertPEM); err != nil {
			t.Fatal(err)
		}
		for i := here; i < n; i++ {
			// A parent reads a member process through the kubeconfig in
			// its root directory, at its address, across restarts.
			members[i].RootDirectory, members[i].Port, members[i].ClientCAFile = t.TempDir(), reserve(), caFile
		}
		g.Processes, procsReady = startMemberProcesses(t, members[here:])
		for _, p := range g.Processes {
			p.clientCA = clientCA
		}
	}
	g.Servers = make([]*Server, here)
	errs := make([]error, here)
	var procsErr error
	var wg sync.WaitGroup
	for i := range here {
		var opts Options
		members[i].option()(&opts)
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(klog.NewContext(context.Background(), klog.Background()), DefaultTimeout)
			defer cancel()
			g.Servers[i], errs[i] = Start(ctx, opts)
		})
	}
	wg.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), DefaultTimeout)
		defer cancel()
		procsErr = procsReady(ctx)
	})
	wg.Wait()
	for i, srv := range g.Servers {
		if srv != nil {
			StopOnCleanup(t, fmt.Sprintf("member m%d", i), srv.Stop)
		}
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("starting member m%d: %v", i, err)
		}
	}
	if procsErr != nil {
		t.Fatal(procsErr)
	}
	return g
}
