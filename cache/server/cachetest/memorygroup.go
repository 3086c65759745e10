package cachetest

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"k8s.io/klog/v2"

	"github.com/kcp-cache/kcp-cache/cache/options"
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
	members := make([]memberSpec, n)
	var peers []string
	for i := range n {
		peerPort, err := ports.Reserve()
		if err != nil {
			t.Fatal(err)
		}
		clientPort, err := ports.Reserve()
		if err != nil {
			t.Fatal(err)
		}
		peers = append(peers, fmt.Sprintf("m%d=https://127.0.0.1:%d", i, peerPort))
		members[i] = memberSpec{Name: fmt.Sprintf("m%d", i), ClientURL: fmt.Sprintf("https://127.0.0.1:%d", clientPort)}
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
	clientURLs := make([]string, n)
	for i := range members {
		members[i].Peers, members[i].SecretFile = peers, secretFile
		clientURLs[i] = members[i].ClientURL
	}
	here := n - processes
	var procs []*MemberProcess
	procsReady := func(context.Context) error { return nil }
	if processes > 0 {
		procs, procsReady = startMemberProcesses(t, members[here:])
	}
	servers := make([]*Server, here)
	errs := make([]error, here)
	var procsErr error
	var wg sync.WaitGroup
	for i := range here {
		var o Options
		members[i].option()(&o)
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(klog.NewContext(context.Background(), klog.Background()), DefaultTimeout)
			defer cancel()
			servers[i], errs[i] = Start(ctx, o)
		})
	}
	wg.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), DefaultTimeout)
		defer cancel()
		procsErr = procsReady(ctx)
	})
	wg.Wait()
	for i, srv := range servers {
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
	return servers, procs, clientURLs
}
