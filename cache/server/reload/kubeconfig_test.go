package reload

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/component-base/metrics/testutil"

	"github.com/kcp-cache/kcp-cache/cache/server/pki"
)

// seen is a TLS server of its own CA that records who called it: the
// client certificate's common name and the Authorization header.
type seen struct {
	*httptest.Server
	ca *pki.CA

	mu        sync.Mutex
	cn, authz string
}

func newSeen(t *testing.T) *seen {
	t.Helper()
	ca, err := pki.NewCA("seen")
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := ca.IssueServing("seen", []net.IP{net.ParseIP("127.0.0.1")})
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	s := &seen{ca: ca}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.authz, s.cn = r.Header.Get("Authorization"), ""
		if len(r.TLS.PeerCertificates) > 0 {
			s.cn = r.TLS.PeerCertificates[0].Subject.CommonName
		}
	}))
	s.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, ClientAuth: tls.RequestClientCert}
	s.StartTLS()
	t.Cleanup(s.Close)
	return s
}

// call sends a GET to s through client and returns what s saw, or the
// error.
func (s *seen) call(client *http.Client) (string, error) {
	resp, err := client.Get(s.URL)
	if err != nil {
		return "", err
	}
	_ = resp.Body.Close()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cn + " " + s.authz, nil
}

func write(t *testing.T, path string, data []byte) {
	t.Helper()
	// As a rotation should: a complete file renamed over the old one.
	tmp := path + ".new"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// credentials writes a client certificate for cn, the CA to trust and a
// token into the files the kubeconfig names.
func credentials(t *testing.T, dir string, trust *pki.CA, cn, token string) {
	t.Helper()
	client, err := pki.NewCA("clients")
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := client.IssueClient(cn, nil)
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "ca.crt"), trust.CertPEM)
	write(t, filepath.Join(dir, "client.crt"), certPEM)
	write(t, filepath.Join(dir, "client.key"), keyPEM)
	write(t, filepath.Join(dir, "token"), []byte(token+"\n"))
}

func kubeconfigFor(t *testing.T, path, server string) {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	// Relative paths: they are the kubeconfig's directory's.
	kc.Clusters["c"] = &clientcmdapi.Cluster{Server: server, CertificateAuthority: "ca.crt"}
	kc.AuthInfos["u"] = &clientcmdapi.AuthInfo{ClientCertificate: "client.crt", ClientKey: "client.key", TokenFile: "token"}
	kc.Contexts["peer"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	kc.CurrentContext = "peer"
	raw, err := clientcmd.Write(*kc)
	if err != nil {
		t.Fatal(err)
	}
	write(t, path, raw)
}

// A client built once from Kubeconfig's configuration sends the
// credentials of the files as they are at the last check: the token, the
// client certificate and the CA it trusts, each read from a file the
// kubeconfig names. Content that cannot be loaded, or a kubeconfig naming
// another server, leaves the credentials in force as they were.
func TestKubeconfigCredentialsFollowTheFiles(t *testing.T) {
	ctx := context.Background()
	one, two := newSeen(t), newSeen(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "peer.kubeconfig")
	credentials(t, dir, one.ca, "first", "token-1")
	kubeconfigFor(t, path, one.URL)
	const name = "test:rotation"

	cfg, w, err := Kubeconfig(name, path, "")
	if err != nil {
		t.Fatal(err)
	}
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := one.call(client); err != nil || got != "first Bearer token-1" {
		t.Fatalf("before the rotation: %q, %v; want the first certificate and token-1", got, err)
	}
	if _, err := two.call(client); err == nil {
		t.Fatal("a server of another CA was trusted before the CA file named it")
	}
	if w.Check(ctx) {
		t.Fatal("a check of unchanged files reloaded them")
	}

	// Every file the kubeconfig names changes, not the kubeconfig: a CA
	// that signs only the second server, another certificate and token.
	credentials(t, dir, two.ca, "second", "token-2")
	if !w.Check(ctx) {
		t.Fatal("the check did not see the changed files")
	}
	if got, err := two.call(client); err != nil || got != "second Bearer token-2" {
		t.Fatalf("after the rotation: %q, %v; want the second certificate and token-2", got, err)
	}
	if _, err := one.call(client); err == nil {
		t.Fatal("the first server's CA was still trusted after the CA file dropped it")
	}

	for _, bad := range []struct {
		what    string
		rewrite func()
	}{
		{"a kubeconfig that does not parse", func() { write(t, path, []byte("{not yaml")) }},
		{"a kubeconfig naming another server", func() { kubeconfigFor(t, path, one.URL+"/elsewhere") }},
		{"a client key that is missing", func() { _ = os.Remove(filepath.Join(dir, "client.key")) }},
	} {
		bad.rewrite()
		if w.Check(ctx) {
			t.Errorf("%s was loaded", bad.what)
		}
		if got, err := two.call(client); err != nil || got != "second Bearer token-2" {
			t.Errorf("after %s: %q, %v; want the credentials in force before", bad.what, got, err)
		}
		if v, err := testutil.GetGaugeMetricValue(reloadFailing.WithLabelValues(name)); err != nil || v != 1 {
			t.Errorf("after %s, kcp_cache_file_reload_failing is %v (%v), want 1", bad.what, v, err)
		}
		credentials(t, dir, two.ca, "second", "token-2")
		kubeconfigFor(t, path, one.URL)
		if !w.Check(ctx) {
			t.Errorf("good files after %s were not loaded", bad.what)
		}
	}
	if v, err := testutil.GetGaugeMetricValue(reloadFailing.WithLabelValues(name)); err != nil || v != 0 {
		t.Errorf("once good files are back, kcp_cache_file_reload_failing is %v (%v), want 0", v, err)
	}
	if v, err := testutil.GetCounterMetricValue(reloads.WithLabelValues(name, "error")); err != nil || v != 3 {
		t.Errorf("kcp_cache_file_reloads_total{result=error} is %v (%v), want 3: once per bad content", v, err)
	}
}
