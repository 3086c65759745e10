package server

import (
	"fmt"
	"net"
	"os"
	"strconv"

	genericoptions "k8s.io/apiserver/pkg/server/options"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/kcp-cache/kcp-cache/cache/client"
)

// servingCAData returns PEM data that verifies the serving certificate. For
// a self-signed certificate the file holds the leaf and its signing CA.
func servingCAData(o *genericoptions.SecureServingOptions) ([]byte, error) {
	if o.ServerCert.GeneratedCert != nil {
		cert, _ := o.ServerCert.GeneratedCert.CurrentCertKeyContent()
		return cert, nil
	}
	if f := o.ServerCert.CertKey.CertFile; f != "" {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("reading serving certificate: %w", err)
		}
		return b, nil
	}
	return nil, nil
}

// adminRESTConfig is a client configuration for the admin user.
func adminRESTConfig(host string, caData []byte, token string) *rest.Config {
	// The cache is ours; let callers' own limits apply.
	return client.Unthrottled(&rest.Config{
		Host:            "https://" + host,
		BearerToken:     token,
		TLSClientConfig: rest.TLSClientConfig{CAData: caData},
	})
}

// WriteKubeconfig writes cfg (host, CA data, bearer token) as a kubeconfig
// with one context, "cache".
func WriteKubeconfig(path string, cfg *rest.Config) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["cache"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{Token: cfg.BearerToken, ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData}
	kc.Contexts["cache"] = &clientcmdapi.Context{Cluster: "cache", AuthInfo: "admin"}
	kc.CurrentContext = "cache"
	return clientcmd.WriteToFile(*kc, path)
}

// AdminConfig returns a client configuration for the server root (no
// /services/cache prefix) authenticated as the admin user.
func (s *Server) AdminConfig() *rest.Config { return rest.CopyConfig(s.adminConfig) }

// KubeconfigPath is the admin kubeconfig New wrote; empty for a mounted cache.
func (s *Server) KubeconfigPath() string { return s.kubeconfigPath }

// HostShardConfig returns a client configuration for a mounted cache that
// authenticates as the host's shard (Host.Shard), or nil without one.
func (s *Server) HostShardConfig() *rest.Config {
	if s.hostShardConfig == nil {
		return nil
	}
	return rest.CopyConfig(s.hostShardConfig)
}

// listenAddress returns host:port clients on this machine reach the server at.
func listenAddress(l net.Listener) string {
	addr := l.Addr().(*net.TCPAddr)
	host := addr.IP.String()
	if addr.IP.IsUnspecified() {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, strconv.Itoa(addr.Port))
}
