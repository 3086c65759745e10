package pki

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"testing"
)

func TestIssuedCertificatesVerifyAgainstTheirCA(t *testing.T) {
	ca, err := NewCA("test-ca")
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca.CertPEM) {
		t.Fatal("CA certificate is not valid PEM")
	}
	other, err := NewCA("other-ca")
	if err != nil {
		t.Fatal(err)
	}

	certPEM, keyPEM, err := ca.IssueClient("system:kcp:shard:amber", []string{"g1", "g2"})
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	leaf := pair.Leaf
	if leaf.Subject.CommonName != "system:kcp:shard:amber" || len(leaf.Subject.Organization) != 2 {
		t.Errorf("subject %v", leaf.Subject)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("client certificate does not verify: %v", err)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err == nil {
		t.Error("a client certificate must not serve")
	}
	otherPool := x509.NewCertPool()
	otherPool.AppendCertsFromPEM(other.CertPEM)
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: otherPool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err == nil {
		t.Error("a certificate verified against another CA")
	}

	certPEM, keyPEM, err = ca.IssueServing("etcd", []net.IP{net.ParseIP("127.0.0.1")})
	if err != nil {
		t.Fatal(err)
	}
	pair, err = tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pair.Leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: "127.0.0.1"}); err != nil {
		t.Errorf("serving certificate does not verify for 127.0.0.1: %v", err)
	}
}
