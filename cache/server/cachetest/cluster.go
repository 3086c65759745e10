package cachetest

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"k8s.io/klog/v2"

	"github.com/kcp-cache/kcp-cache/cache/options"
	"github.com/kcp-cache/kcp-cache/cache/server/embeddedetcd"
	"github.com/kcp-cache/kcp-cache/cache/server/embeddedetcd/etcdtest"
)

// EtcdCluster is a cluster of embedded etcd members on loopback, sharing one
// TLS identity: the topology of a scaled-out cache, whose servers all store
// in one etcd cluster.
type EtcdCluster struct {
	tls     embeddedetcd.TLSFiles
	members []*embeddedetcd.Server
	// cfgs start each member again on its data (Restart).
	cfgs   []embeddedetcd.Config
	urls   []string
	client *clientv3.Client

	mu sync.Mutex
}

// StartEtcdCluster starts n members (without fsync) and stops them when
// the test ends.
func StartEtcdCluster(t testing.TB, n int) *EtcdCluster {
	t.Helper()
	dir := t.TempDir()
	c := &EtcdCluster{members: make([]*embeddedetcd.Server, n)}
	var err error
	if c.tls, err = embeddedetcd.GenerateTLS(filepath.Join(dir, "certs")); err != nil {
		t.Fatal(err)
	}
	cfgs := make([]embeddedetcd.Config, n)
	var initial []string
	for i := range cfgs {
		cfg, err := embeddedetcd.Config{
			Name:          fmt.Sprintf("member-%d", i),
			Directory:     filepath.Join(dir, fmt.Sprintf("member-%d", i)),
			UnsafeNoFsync: true,
			TLS:           &c.tls,
		}.WithPorts()
		if err != nil {
			t.Fatal(err)
		}
		cfgs[i] = cfg
		initial = append(initial, fmt.Sprintf("%s=%s", cfg.Name, cfg.PeerURL()))
		c.urls = append(c.urls, cfg.ClientURL())
	}
	// Members become ready together, once a quorum has met.
	ctx, cancel := context.WithTimeout(klog.NewContext(context.Background(), klog.Background()), DefaultTimeout)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range cfgs {
		cfgs[i].InitialCluster = strings.Join(initial, ",")
		wg.Go(func() { c.members[i], errs[i] = embeddedetcd.Start(ctx, cfgs[i]) })
	}
	wg.Wait()
	c.cfgs = cfgs
	t.Cleanup(func() {
		for i := range c.members {
			c.Stop(i)
		}
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("starting a %d-member etcd cluster: %v", n, err)
	}
	c.client = c.Client(t)
	return c
}

// Endpoints are the members' client URLs.
func (c *EtcdCluster) Endpoints() []string { return c.urls }

// Flags points a cache server at the cluster, as --etcd-servers,
// --etcd-cafile, --etcd-certfile and --etcd-keyfile do.
func (c *EtcdCluster) Flags(o *options.Options) {
	transport := &o.Etcd.StorageConfig.Transport
	transport.ServerList = c.Endpoints()
	transport.TrustedCAFile, transport.CertFile, transport.KeyFile = c.tls.CAFile, c.tls.ClientCertFile, c.tls.ClientKeyFile
}

// Client reaches the cluster through every member.
func (c *EtcdCluster) Client(t testing.TB) *clientv3.Client {
	t.Helper()
	tlsConfig, err := c.tls.ClientTLSConfig()
	if err != nil {
		t.Fatal(err)
	}
	return etcdtest.Dial(t, tlsConfig, c.urls...)
}

// Leader returns the index of the member that leads the cluster now.
func (c *EtcdCluster) Leader(ctx context.Context) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, u := range c.urls {
		if c.members[i] == nil {
			continue
		}
		st, err := c.client.Status(ctx, u)
		if err != nil {
			return -1, fmt.Errorf("status of %s: %w", u, err)
		}
		if st.Leader == st.Header.MemberId {
			return i, nil
		}
	}
	return -1, fmt.Errorf("no member leads the cluster")
}

// Kill stops member i at once, as a crash would: a leader does not hand
// its leadership over, the others have to elect a new one.
func (c *EtcdCluster) Kill(i int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.members[i] != nil {
		c.members[i].Kill()
		c.members[i] = nil
	}
}

// Stop stops member i (its data stays); stopping it again does nothing.
// The member closes gracefully, handing leadership over first.
func (c *EtcdCluster) Stop(i int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.members[i] != nil {
		c.members[i].Close()
		c.members[i] = nil
	}
}

// Restart starts member i again on its data after Kill or Stop; it rejoins
// the cluster as the member it was (etcd ignores the initial cluster of a
// member with data). A running member is left as it is.
func (c *EtcdCluster) Restart(ctx context.Context, i int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.members[i] != nil {
		return nil
	}
	m, err := embeddedetcd.Start(ctx, c.cfgs[i])
	if err != nil {
		return fmt.Errorf("restarting member %d: %w", i, err)
	}
	c.members[i] = m
	return nil
}
