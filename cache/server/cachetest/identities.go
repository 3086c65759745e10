package cachetest

import (
	"testing"

	"k8s.io/client-go/rest"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/server/embeddedetcd"
	"github.com/kcp-cache/kcp-cache/cache/server/pki"
)

// newClientCA creates the CA the server trusts for client certificates
// (--client-ca-file) and writes it to path.
func (s *Server) newClientCA(path string) error {
	ca, err := pki.NewCA("cachetest-clients")
	if err != nil {
		return err
	}
	s.clientCA, s.clientCAFile = ca, path
	return pki.WriteFile(path, ca.CertPEM)
}

// UserConfig returns a configuration for the cache's root that
// authenticates with a client certificate for user in groups, issued by the
// CA the server trusts.
func (s *Server) UserConfig(t testing.TB, user string, groups ...string) *rest.Config {
	t.Helper()
	certPEM, keyPEM, err := s.clientCA.IssueClient(user, groups)
	if err != nil {
		t.Fatal(err)
	}
	c := rest.AnonymousClientConfig(s.config)
	c.CertData, c.KeyData = certPEM, keyPEM
	return c
}

// ShardConfig returns a configuration for the cache's root that
// authenticates as shard's identity, system:kcp:shard:<shard>.
func (s *Server) ShardConfig(t testing.TB, shard string) *rest.Config {
	t.Helper()
	return s.UserConfig(t, kcpcache.ShardUser(shard))
}

// AnonymousConfig returns a configuration for the cache's root without
// credentials (it still trusts the serving certificate).
func (s *Server) AnonymousConfig() *rest.Config { return rest.AnonymousClientConfig(s.config) }

// ClientCA is the CA the server trusts for client certificates.
func (s *Server) ClientCA() *pki.CA { return s.clientCA }

// EtcdTLS holds the client certificate etcd demands: tests that must reach
// etcd "as the server" use it; a client without it is refused.
func (s *Server) EtcdTLS() embeddedetcd.TLSFiles { return s.etcdTLS }
