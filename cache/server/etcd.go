package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"

	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/klog/v2"

	"github.com/kcp-cache/kcp-cache/cache/options"
	"github.com/kcp-cache/kcp-cache/cache/server/embeddedetcd"
)

// etcdDialTimeout bounds how long a new etcd client waits for a connection.
const etcdDialTimeout = 10 * time.Second

// newEtcdClient reaches the etcd of t, with its client TLS if any: the one
// client through which the server's own work (the epoch, data removal)
// reads and writes etcd directly. The API server's storage has clients of
// its own.
func newEtcdClient(t storagebackend.TransportConfig) (*clientv3.Client, error) {
	var tlsConfig *tls.Config
	if t.CertFile != "" || t.KeyFile != "" || t.TrustedCAFile != "" {
		var err error
		tlsConfig, err = transport.TLSInfo{CertFile: t.CertFile, KeyFile: t.KeyFile, TrustedCAFile: t.TrustedCAFile}.ClientConfig()
		if err != nil {
			return nil, fmt.Errorf("etcd client TLS: %w", err)
		}
	}
	cli, err := embeddedetcd.NewClient(t.ServerList, tlsConfig, etcdDialTimeout)
	if err != nil {
		return nil, fmt.Errorf("etcd client: %w", err)
	}
	return cli, nil
}

// memoryGroup is the embedded member's group of --memory-peers; nil
// without one.
func memoryGroup(o *options.MemoryGroupOptions) (*embeddedetcd.Group, error) {
	if !o.Enabled() {
		return nil, nil
	}
	members, err := o.Members()
	if err != nil {
		return nil, err
	}
	g := &embeddedetcd.Group{Name: o.MemberName, ClientURL: o.ClientURL, PeerListenURL: o.PeerListenURL}
	for _, m := range members {
		g.Peers = append(g.Peers, embeddedetcd.Peer{Name: m.Name, URL: m.URL})
	}
	return g, nil
}

// embeddedEtcdTLS writes the embedded member's certificates into dir: a CA
// and identities of this process alone (embeddedetcd.GenerateTLS), or, for
// a member of a group with a secret, the member's identity in the group,
// which serves the group and this server alike (GenerateGroupTLS); the
// group then speaks TLS.
func embeddedEtcdTLS(dir string, o *options.MemoryGroupOptions, g *embeddedetcd.Group) (embeddedetcd.TLSFiles, error) {
	if g == nil || o.SecretFile == "" {
		return embeddedetcd.GenerateTLS(dir)
	}
	secret, err := os.ReadFile(o.SecretFile)
	if err != nil {
		return embeddedetcd.TLSFiles{}, fmt.Errorf("--memory-group-secret-file: %w", err)
	}
	files, err := embeddedetcd.GenerateGroupTLS(dir, secret, g.Name, g.Hosts())
	if err != nil {
		return embeddedetcd.TLSFiles{}, err
	}
	g.TLS = &files
	return files, nil
}

// watchEmbeddedEtcd calls endRun when the embedded etcd stops before ctx
// ends: the server closes its etcd only after Run's run has returned, so
// whatever stops it earlier (a fatal error, its removal from its group, a
// kill) is a failure. The function it returns waits, once ctx has ended,
// until the watch has, and returns the failure, or nil.
func (s *Server) watchEmbeddedEtcd(ctx context.Context, endRun context.CancelFunc) func() error {
	if s.etcd == nil {
		return func() error { return nil }
	}
	var failure error
	done := make(chan struct{})
	go func() {
		defer close(done)
		select {
		case <-ctx.Done():
			return
		case err := <-s.etcd.Err():
			failure = ErrEmbeddedEtcdStopped
			if err != nil {
				failure = fmt.Errorf("%w: %w", ErrEmbeddedEtcdStopped, err)
			}
		case <-s.etcd.Stopped():
			failure = ErrEmbeddedEtcdStopped
		}
		klog.FromContext(ctx).Error(failure, "Stopping the cache server: it cannot serve without its etcd")
		endRun()
	}()
	return func() error {
		<-done
		return failure
	}
}

// embeddedEtcdStopped reports whether the embedded etcd has stopped before
// the server closed it: there is nothing to record the epoch in (Flush
// would wait for its timeout).
func (s *Server) embeddedEtcdStopped() bool {
	if s.etcd == nil {
		return false
	}
	select {
	case <-s.etcd.Stopped():
		return true
	default:
		return false
	}
}

// Epoch is the cache's epoch, announced on every response as
// kcpcache.EpochHeader.
func (s *Server) Epoch() string { return s.epoch.Epoch() }

// EmbeddedEtcdURL is the client URL of the embedded etcd; empty without one.
func (s *Server) EmbeddedEtcdURL() string {
	if s.etcd == nil {
		return ""
	}
	return s.etcd.ClientURL()
}

// EmbeddedEtcdClusterID is the identity of the embedded etcd's cluster;
// empty without one. An in-memory etcd (--storage=memory) alone has a new
// one at every start: the cache starts empty, a new epoch. A member of a
// group (--memory-peers) that rejoins a running group keeps the group's.
func (s *Server) EmbeddedEtcdClusterID() string {
	if s.etcd == nil {
		return ""
	}
	return s.etcd.ClusterID()
}

// EmbeddedEtcdTLS holds the client certificate the embedded etcd demands
// (only this server has it); nil without an embedded etcd.
func (s *Server) EmbeddedEtcdTLS() *embeddedetcd.TLSFiles { return s.etcdTLS }

// ErrEmbeddedEtcdStopped is returned by Run (wrapped, with etcd's error if
// it gave one) when the embedded etcd stopped while the server ran: the
// server stopped, since it cannot serve without its storage. Its host
// decides what comes next (a restart, as a process supervisor would).
var ErrEmbeddedEtcdStopped = errors.New("the embedded etcd stopped under the running cache server")
