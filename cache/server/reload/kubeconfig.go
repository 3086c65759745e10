package reload

import (
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"

	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Kubeconfig loads a client configuration from a kubeconfig file whose
// credentials follow the file while the configuration is in use: the
// bearer token, the client certificate and key, the CA and whatever else
// the transport is built from (inline or in the files the kubeconfig
// names, read again at every check). context names the kubeconfig's
// context; empty is its current context. The Watcher it returns keeps the
// configuration current when run; name identifies it in logs and metrics.
//
// The configuration's Transport sends every request with the credentials
// of the last content that loaded: clients built from it (rest.HTTPClientFor,
// client-go clientsets) need not be built again. Requests under way, such
// as an open watch, finish on the connection they started on. Only the
// server address is fixed: a kubeconfig that names another server is not
// loaded (a restart takes it).
//
// How it works, on client-go's public API only: each load builds a
// complete transport with rest.TransportFor from the kubeconfig (files
// inlined), and the returned configuration's Transport hands each request
// to the newest one; the previous one's idle connections are closed.
func Kubeconfig(name, path, context string) (*rest.Config, *Watcher, error) {
	k := &kubeconfig{path: path, context: context}
	w, err := NewWatcher(name, k)
	if err != nil {
		return nil, nil, err
	}
	return k.config, w, nil
}

// kubeconfig is the Source behind Kubeconfig. A Watcher calls Load and
// Files one at a time.
type kubeconfig struct {
	path, context string
	// files are the files the last Load read.
	files []string
	// config is the first load's configuration: its server and client
	// settings, with transport as its Transport.
	config    *rest.Config
	transport swapTransport
}

func (k *kubeconfig) Files() []string { return k.files }

func (k *kubeconfig) Load() (Digest, error) {
	var d Digester
	k.files = []string{k.path}
	raw, err := d.ReadFile(k.path)
	if err != nil {
		return Digest{}, err
	}
	kc, err := clientcmd.Load(raw)
	if err != nil {
		return d.Sum(), fmt.Errorf("kubeconfig %s: %w", k.path, err)
	}
	// As clientcmd.LoadFromFile: relative paths are the file's.
	for _, c := range kc.Clusters {
		c.LocationOfOrigin = k.path
	}
	for _, a := range kc.AuthInfos {
		a.LocationOfOrigin = k.path
	}
	if err := clientcmd.ResolveLocalPaths(kc); err != nil {
		return d.Sum(), fmt.Errorf("kubeconfig %s: %w", k.path, err)
	}
	cfg, err := clientcmd.NewNonInteractiveClientConfig(*kc, k.context, &clientcmd.ConfigOverrides{}, nil).ClientConfig()
	if err != nil {
		// Perhaps a file it names is missing: not all is read, so the
		// next check loads again.
		return Digest{}, fmt.Errorf("kubeconfig %s: %w", k.path, err)
	}
	// The files it names are read here, once, into the digest and the
	// configuration, so that what is in force is what was compared.
	for _, f := range []struct {
		file *string
		data *[]byte
	}{{&cfg.CAFile, &cfg.CAData}, {&cfg.CertFile, &cfg.CertData}, {&cfg.KeyFile, &cfg.KeyData}} {
		if *f.file == "" {
			continue
		}
		k.files = append(k.files, *f.file)
		b, err := d.ReadFile(*f.file)
		if err != nil {
			return Digest{}, fmt.Errorf("kubeconfig %s: %w", k.path, err)
		}
		*f.data, *f.file = b, ""
	}
	if f := cfg.BearerTokenFile; f != "" {
		k.files = append(k.files, f)
		b, err := d.ReadFile(f)
		if err != nil {
			return Digest{}, fmt.Errorf("kubeconfig %s: %w", k.path, err)
		}
		cfg.BearerToken, cfg.BearerTokenFile = strings.TrimSpace(string(b)), ""
	}
	if k.config != nil && cfg.Host != k.config.Host {
		return d.Sum(), fmt.Errorf("kubeconfig %s names server %s instead of %s: a new address is taken at the next start; the credentials in force stay", k.path, cfg.Host, k.config.Host)
	}
	rt, err := rest.TransportFor(cfg)
	if err != nil {
		return d.Sum(), fmt.Errorf("kubeconfig %s: %w", k.path, err)
	}
	if k.config == nil {
		k.config = &rest.Config{
			Host:          cfg.Host,
			APIPath:       cfg.APIPath,
			ContentConfig: cfg.ContentConfig,
			QPS:           cfg.QPS,
			Burst:         cfg.Burst,
			Timeout:       cfg.Timeout,
			Transport:     &k.transport,
		}
	}
	if old := k.transport.swap(rt); old != nil {
		utilnet.CloseIdleConnectionsFor(old)
	}
	return d.Sum(), nil
}

// swapTransport sends each request through the newest of the transports
// it was given.
type swapTransport struct {
	current atomic.Pointer[roundTripper]
}

type roundTripper struct{ http.RoundTripper }

func (t *swapTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	return t.current.Load().RoundTrip(req)
}

// CloseIdleConnections closes the idle connections of the transport in use,
// as http.Client.CloseIdleConnections expects of a transport.
func (t *swapTransport) CloseIdleConnections() {
	utilnet.CloseIdleConnectionsFor(t.current.Load().RoundTripper)
}

// swap makes rt the transport of the next requests and returns the
// previous one (nil at the first).
func (t *swapTransport) swap(rt http.RoundTripper) http.RoundTripper {
	old := t.current.Swap(&roundTripper{rt})
	if old == nil {
		return nil
	}
	return old.RoundTripper
}
