// Package identitytest mints a cluster CA and certificates of
// node/identity's profiles with crypto/x509 alone, for tests that need
// nodes and owners speaking TLS to each other without running a cluster.
//
// node/identity's own tests use it from the external test package
// identity_test, since this package imports identity. Only tests import it.
package identitytest

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"

	"cairn.dev/cairn/node/identity"
)

// CA is a self-signed cluster CA held in memory.
type CA struct {
	// Key is the CA's private key.
	Key ed25519.PrivateKey
	// Cert is the CA's certificate; Cert.Raw is its DER.
	Cert *x509.Certificate
}

// NewCA makes a CA named name with a fresh key, valid from an hour ago for
// a day.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key := NewKey(t)
	template := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, template, template, key.Public(), key)
	if err != nil {
		t.Fatalf("creating CA certificate: %v", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatalf("parsing CA certificate: %v", err)
	}
	return &CA{Key: key, Cert: cert}
}

// DER is the CA certificate in DER.
func (ca *CA) DER() []byte { return ca.Cert.Raw }

// Sign signs template for pub with a random serial, valid from notBefore
// to notAfter. It does not fail the test, so a fake server may call it
// from a goroutine of its own.
func (ca *CA) Sign(template x509.Certificate, pub ed25519.PublicKey, notBefore, notAfter time.Time) ([]byte, error) {
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		return nil, fmt.Errorf("when choosing a serial: %w", err)
	}
	template.SerialNumber = serial
	template.NotBefore = notBefore
	template.NotAfter = notAfter
	der, err := x509.CreateCertificate(rand.Reader, &template, ca.Cert, pub, ca.Key)
	if err != nil {
		return nil, fmt.Errorf("when issuing a certificate: %w", err)
	}
	return der, nil
}

// Issue signs template for pub, valid from an hour ago for a day.
func (ca *CA) Issue(t testing.TB, template x509.Certificate, pub ed25519.PublicKey) []byte {
	t.Helper()
	der, err := ca.Sign(template, pub, time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	return der
}

// Node makes a node identity with a fresh key and a node certificate.
func (ca *CA) Node(t testing.TB) *identity.Node {
	t.Helper()
	key := NewKey(t)
	pub := key.Public().(ed25519.PublicKey)
	n, err := identity.NewNode(key, ca.Issue(t, identity.NodeCertificateTemplate(pub), pub), ca.DER())
	if err != nil {
		t.Fatalf("NewNode: %v", err)
	}
	return n
}

// Owner makes an owner key and the owner certificate the CA issued for it.
func (ca *CA) Owner(t testing.TB) (ed25519.PrivateKey, []byte) {
	t.Helper()
	key := NewKey(t)
	return key, ca.Issue(t, identity.OwnerCertificateTemplate(), key.Public().(ed25519.PublicKey))
}

// NewKey generates an ed25519 key.
func NewKey(t testing.TB) ed25519.PrivateKey {
	t.Helper()
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatalf("generating key: %v", err)
	}
	return key
}

// ReadMetricsCredential reads the scraper's credential that cairnctl
// metrics credential writes into dir: the key (key.pem, PKCS #8), the
// metrics certificate (cert.pem) and the cluster CA (ca.pem), DER.
func ReadMetricsCredential(t testing.TB, dir string) (key ed25519.PrivateKey, certDER, caDER []byte) {
	t.Helper()
	der := func(name string) []byte {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		block, _ := pem.Decode(b)
		if block == nil {
			t.Fatalf("%s holds no PEM block", name)
		}
		return block.Bytes
	}
	k, err := x509.ParsePKCS8PrivateKey(der("key.pem"))
	if err != nil {
		t.Fatalf("key.pem: %v", err)
	}
	key, ok := k.(ed25519.PrivateKey)
	if !ok {
		t.Fatalf("key.pem holds a %T, want an ed25519 key", k)
	}
	return key, der("cert.pem"), der("ca.pem")
}
