package rpc

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"testing"
	"time"

	"cairn.dev/cairn/node/identity"
)

// testCA is a cluster CA minted with crypto/x509 alone, issuing
// certificates of node/identity's profile.
type testCA struct {
	key  ed25519.PrivateKey
	cert *x509.Certificate
}

func newTestCA(t testing.TB, name string) *testCA {
	t.Helper()
	key := newKey(t)
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
	return &testCA{key: key, cert: cert}
}

func (ca *testCA) der() []byte { return ca.cert.Raw }

// issue signs template for pub, valid from an hour ago for a day.
func (ca *testCA) issue(t testing.TB, template x509.Certificate, pub ed25519.PublicKey) []byte {
	t.Helper()
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		t.Fatalf("choosing serial: %v", err)
	}
	template.SerialNumber = serial
	template.NotBefore = time.Now().Add(-time.Hour)
	template.NotAfter = time.Now().Add(24 * time.Hour)
	der, err := x509.CreateCertificate(rand.Reader, &template, ca.cert, pub, ca.key)
	if err != nil {
		t.Fatalf("issuing certificate: %v", err)
	}
	return der
}

// node makes a node identity with a fresh key and a node certificate.
func (ca *testCA) node(t testing.TB) *identity.Node {
	t.Helper()
	key := newKey(t)
	pub := key.Public().(ed25519.PublicKey)
	n, err := identity.NewNode(key, ca.issue(t, identity.NodeCertificateTemplate(pub), pub), ca.der())
	if err != nil {
		t.Fatalf("NewNode: %v", err)
	}
	return n
}

// owner makes an owner key and its owner certificate.
func (ca *testCA) owner(t testing.TB) (ed25519.PrivateKey, []byte) {
	t.Helper()
	key := newKey(t)
	return key, ca.issue(t, identity.OwnerCertificateTemplate(), key.Public().(ed25519.PublicKey))
}

func newKey(t testing.TB) ed25519.PrivateKey {
	t.Helper()
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatalf("generating key: %v", err)
	}
	return key
}
