package embeddedetcd

import (
	"crypto/ed25519"
	"crypto/hkdf"
	"crypto/sha256"
	"crypto/tls"
	"fmt"
	"net"
	"path/filepath"

	"go.etcd.io/etcd/client/pkg/v3/transport"

	"github.com/kcp-cache/kcp-cache/cache/server/pki"
)

// TLSFiles are the PEM files of a member that accepts only clients holding
// a certificate of its own CA: the cache server that started it.
type TLSFiles struct {
	CAFile string
	// ServerCertFile and ServerKeyFile serve clients and peers.
	ServerCertFile, ServerKeyFile string
	// ClientCertFile and ClientKeyFile are the one client identity.
	ClientCertFile, ClientKeyFile string
}

// GenerateTLS writes a fresh CA, a serving certificate for 127.0.0.1 and a
// client certificate into dir (owner-only files). Calling it at every start
// is intended: only this process and its member use them, nothing persists
// but the data, and no old key stays valid across restarts. The CA key is
// never written.
func GenerateTLS(dir string) (TLSFiles, error) {
	ca, err := pki.NewCA("kcp-cache-embedded-etcd")
	if err != nil {
		return TLSFiles{}, err
	}
	serverCert, serverKey, err := ca.IssueServing("kcp-cache-embedded-etcd", []net.IP{net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return TLSFiles{}, err
	}
	clientCert, clientKey, err := ca.IssueClient("kcp-cache-server", nil)
	if err != nil {
		return TLSFiles{}, err
	}
	f := TLSFiles{
		CAFile:         filepath.Join(dir, "ca.crt"),
		ServerCertFile: filepath.Join(dir, "server.crt"),
		ServerKeyFile:  filepath.Join(dir, "server.key"),
		ClientCertFile: filepath.Join(dir, "client.crt"),
		ClientKeyFile:  filepath.Join(dir, "client.key"),
	}
	for path, data := range map[string][]byte{
		f.CAFile: ca.CertPEM, f.ServerCertFile: serverCert, f.ServerKeyFile: serverKey,
		f.ClientCertFile: clientCert, f.ClientKeyFile: clientKey,
	} {
		if err := pki.WriteFile(path, data); err != nil {
			return TLSFiles{}, err
		}
	}
	return f, nil
}

// ClientTLSConfig is what a clientv3 client needs to reach the member.
func (f TLSFiles) ClientTLSConfig() (*tls.Config, error) {
	return transport.TLSInfo{CertFile: f.ClientCertFile, KeyFile: f.ClientKeyFile, TrustedCAFile: f.CAFile}.ClientConfig()
}

func (f TLSFiles) serverInfo() transport.TLSInfo {
	return transport.TLSInfo{
		CertFile:       f.ServerCertFile,
		KeyFile:        f.ServerKeyFile,
		TrustedCAFile:  f.CAFile,
		ClientCertAuth: true,
	}
}

// GroupSecretMinBytes is the least a memory group's secret holds.
const GroupSecretMinBytes = 32

// GenerateGroupTLS writes into dir a member's identity in a group that
// shares secret: the group's CA, which every member derives from the secret
// alone (pki.NewCAFromSeed), and a certificate of that CA for this member,
// valid for hosts (its peer and client URLs' hosts; 127.0.0.1, where its
// own server reaches it, is added), to serve and as a client. A member
// accepts only peers and clients with a certificate of the group's CA:
// only processes holding the secret take part in the group. As with
// GenerateTLS, the member's key is new at every start; the CA key is never
// written.
func GenerateGroupTLS(dir string, secret []byte, member string, hosts []string) (TLSFiles, error) {
	if len(secret) < GroupSecretMinBytes {
		return TLSFiles{}, fmt.Errorf("a memory group's secret must hold at least %d bytes, it holds %d", GroupSecretMinBytes, len(secret))
	}
	seed, err := hkdf.Key(sha256.New, secret, nil, "kcp-cache memory group CA", ed25519.SeedSize)
	if err != nil {
		return TLSFiles{}, err
	}
	ca, err := pki.NewCAFromSeed("kcp-cache-memory-group", seed)
	if err != nil {
		return TLSFiles{}, err
	}
	cert, key, err := ca.IssuePeer("kcp-cache-memory-group-"+member, append([]string{"127.0.0.1", "localhost"}, hosts...))
	if err != nil {
		return TLSFiles{}, err
	}
	f := TLSFiles{
		CAFile:         filepath.Join(dir, "ca.crt"),
		ServerCertFile: filepath.Join(dir, "member.crt"),
		ServerKeyFile:  filepath.Join(dir, "member.key"),
		ClientCertFile: filepath.Join(dir, "member.crt"),
		ClientKeyFile:  filepath.Join(dir, "member.key"),
	}
	for path, data := range map[string][]byte{f.CAFile: ca.CertPEM, f.ServerCertFile: cert, f.ServerKeyFile: key} {
		if err := pki.WriteFile(path, data); err != nil {
			return TLSFiles{}, err
		}
	}
	return f, nil
}
