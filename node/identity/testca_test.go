package identity

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"testing"
	"time"
)

// testCA is a cluster CA for tests, minted with crypto/x509 alone.
type testCA struct {
	key  ed25519.PrivateKey
	cert *x509.Certificate
}

func newTestCA(t testing.TB, name string) *testCA {
	t.Helper()
	key := mustKey(t)
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

// issue signs template for pub, valid from notBefore to notAfter.
func (ca *testCA) issue(t testing.TB, template x509.Certificate, pub ed25519.PublicKey, notBefore, notAfter time.Time) []byte {
	t.Helper()
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		t.Fatalf("choosing serial: %v", err)
	}
	template.SerialNumber = serial
	template.NotBefore = notBefore
	template.NotAfter = notAfter
	der, err := x509.CreateCertificate(rand.Reader, &template, ca.cert, pub, ca.key)
	if err != nil {
		t.Fatalf("issuing certificate: %v", err)
	}
	return der
}

// issueValid signs template for pub, valid from an hour ago for a day.
func (ca *testCA) issueValid(t testing.TB, template x509.Certificate, pub ed25519.PublicKey) []byte {
	t.Helper()
	return ca.issue(t, template, pub, time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour))
}

// newNode makes a node with a fresh key and a currently valid certificate.
func (ca *testCA) newNode(t testing.TB) *Node {
	t.Helper()
	key := mustKey(t)
	return mustNode(t, key, ca.issueValid(t, NodeCertificateTemplate(pub(key)), pub(key)), ca.der())
}

// newExpiredNode makes a node whose certificate expired an hour ago.
func (ca *testCA) newExpiredNode(t testing.TB) *Node {
	t.Helper()
	key := mustKey(t)
	der := ca.issue(t, NodeCertificateTemplate(pub(key)), pub(key), time.Now().Add(-48*time.Hour), time.Now().Add(-time.Hour))
	return mustNode(t, key, der, ca.der())
}

// owner returns an owner key and a certificate the CA issued for it.
func (ca *testCA) owner(t testing.TB) (ed25519.PrivateKey, []byte) {
	t.Helper()
	key := mustKey(t)
	return key, ca.issueValid(t, OwnerCertificateTemplate(), pub(key))
}

// rawConfig presents certDER with key, whether or not they belong together,
// and verifies nothing: a peer that ignores this package's rules.
func rawConfig(certDER []byte, key ed25519.PrivateKey) *tls.Config {
	return &tls.Config{
		MinVersion:         tls.VersionTLS13,
		Certificates:       []tls.Certificate{{Certificate: [][]byte{certDER}, PrivateKey: key}},
		InsecureSkipVerify: true,
		ClientAuth:         tls.RequestClientCert,
	}
}

// selfSignedLike signs template with key itself, valid from an hour ago for
// a day.
func selfSignedLike(t testing.TB, template x509.Certificate, key ed25519.PrivateKey) []byte {
	t.Helper()
	template.SerialNumber = big.NewInt(2)
	template.NotBefore = time.Now().Add(-time.Hour)
	template.NotAfter = time.Now().Add(24 * time.Hour)
	der, err := x509.CreateCertificate(rand.Reader, &template, &template, key.Public(), key)
	if err != nil {
		t.Fatalf("creating self-signed certificate: %v", err)
	}
	return der
}

func mustKey(t testing.TB) ed25519.PrivateKey {
	t.Helper()
	key, err := GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func mustNode(t testing.TB, key ed25519.PrivateKey, certDER, caDER []byte) *Node {
	t.Helper()
	n, err := NewNode(key, certDER, caDER)
	if err != nil {
		t.Fatalf("NewNode: %v", err)
	}
	return n
}

func pub(key ed25519.PrivateKey) ed25519.PublicKey {
	return key.Public().(ed25519.PublicKey)
}
