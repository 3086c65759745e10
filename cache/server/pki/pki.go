package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// validity is long because nothing rotates these certificates: the etcd
// ones are regenerated at every start, the test and demo ones live minutes.
const validity = 10 * 365 * 24 * time.Hour

// CA is a certificate authority held in memory.
type CA struct {
	cert *x509.Certificate
	key  crypto.Signer
	// CertPEM is the CA certificate, for --client-ca-file or a trust bundle.
	CertPEM []byte
}

// NewCA creates a self-signed CA named commonName.
func NewCA(commonName string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl, err := template(pkix.Name{CommonName: commonName})
	if err != nil {
		return nil, err
	}
	tmpl.IsCA = true
	tmpl.BasicConstraintsValid = true
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("creating CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{cert: cert, key: key, CertPEM: pemBlock("CERTIFICATE", der)}, nil
}

// IssueClient returns a client certificate and its key (both PEM) for user
// commonName in groups (the subject's organizations), as Kubernetes'
// x509 authenticator reads them.
func (ca *CA) IssueClient(commonName string, groups []string) (certPEM, keyPEM []byte, err error) {
	return ca.issue(pkix.Name{CommonName: commonName, Organization: groups}, nil, nil, x509.ExtKeyUsageClientAuth)
}

// IssueServing returns a certificate and key valid for the given loopback
// IPs, usable both to serve and as a client (etcd peers are both).
func (ca *CA) IssueServing(commonName string, ips []net.IP) (certPEM, keyPEM []byte, err error) {
	var names []string
	if len(ips) > 0 {
		names = []string{"localhost"}
	}
	return ca.issue(pkix.Name{CommonName: commonName}, ips, names, x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth)
}

func (ca *CA) issue(subject pkix.Name, ips []net.IP, names []string, usages ...x509.ExtKeyUsage) ([]byte, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl, err := template(subject)
	if err != nil {
		return nil, nil, err
	}
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	tmpl.ExtKeyUsage = usages
	tmpl.IPAddresses, tmpl.DNSNames = ips, names
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
	if err != nil {
		return nil, nil, fmt.Errorf("issuing certificate for %q: %w", subject.CommonName, err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pemBlock("CERTIFICATE", der), pemBlock("PRIVATE KEY", keyDER), nil
}

func template(subject pkix.Name) (*x509.Certificate, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, err
	}
	now := time.Now()
	return &x509.Certificate{
		SerialNumber: serial,
		Subject:      subject,
		// A minute of slack for clocks that disagree slightly.
		NotBefore: now.Add(-time.Minute),
		NotAfter:  now.Add(validity),
	}, nil
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

// WriteFile writes data readable by the owner only, creating the directory.
// Keys and certificates alike: there is no reason for others to read them.
func WriteFile(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o600)
}

// NewCAFromSeed creates the CA that seed determines: an Ed25519 key derived
// from seed and a certificate with fixed fields, so that every holder of
// the same seed creates the same CA, without exchanging anything but the
// seed. It is for groups of processes that share a secret (an in-memory
// group's members); seed must be 32 bytes.
func NewCAFromSeed(commonName string, seed []byte) (*CA, error) {
	if len(seed) != ed25519.SeedSize {
		return nil, fmt.Errorf("a CA seed is %d bytes, not %d", ed25519.SeedSize, len(seed))
	}
	key := ed25519.NewKeyFromSeed(seed)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC),
		NotAfter:              time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("creating CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{cert: cert, key: key, CertPEM: pemBlock("CERTIFICATE", der)}, nil
}

// IssuePeer returns a certificate and key valid for hosts (IP addresses or
// DNS names), both to serve and as a client: a member of a cluster is both
// to its peers.
func (ca *CA) IssuePeer(commonName string, hosts []string) (certPEM, keyPEM []byte, err error) {
	var ips []net.IP
	var names []string
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			ips = append(ips, ip)
		} else {
			names = append(names, h)
		}
	}
	return ca.issue(pkix.Name{CommonName: commonName}, ips, names, x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth)
}
