package run

import (
	"path/filepath"

	"k8s.io/client-go/rest"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/options"
	"github.com/kcp-cache/kcp-cache/cache/server"
	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
	"github.com/kcp-cache/kcp-cache/cache/server/pki"
)

// Identities issues per-shard client certificates for a cache server, as
// an operator would with openssl (see the README's "Security" section).
type Identities struct {
	ca  *pki.CA
	dir string
	// CAFile is the cache server's --client-ca-file.
	CAFile string
}

// NewIdentities creates a client CA and writes its certificate into dir.
func NewIdentities(dir string) (*Identities, error) {
	ca, err := pki.NewCA("kcp-cache-shards")
	if err != nil {
		return nil, err
	}
	i := &Identities{ca: ca, dir: dir, CAFile: filepath.Join(dir, "client-ca.crt")}
	return i, pki.WriteFile(i.CAFile, ca.CertPEM)
}

// TrustedBy makes a cache server accept the identities.
func (i *Identities) TrustedBy(o *options.Options) {
	o.Authentication.ClientCert.ClientCA = i.CAFile
}

// ShardKubeconfig writes a kubeconfig for cache that authenticates as
// shard (CN=system:kcp:shard:<shard>) and returns its path.
func (i *Identities) ShardKubeconfig(cache *cachetest.Server, shard string) (string, error) {
	certPEM, keyPEM, err := i.ca.IssueClient(kcpcache.ShardUser(shard), nil)
	if err != nil {
		return "", err
	}
	cfg := rest.AnonymousClientConfig(cache.Config())
	cfg.CertData, cfg.KeyData = certPEM, keyPEM
	path := filepath.Join(i.dir, shard+".kubeconfig")
	return path, server.WriteKubeconfig(path, cfg)
}
