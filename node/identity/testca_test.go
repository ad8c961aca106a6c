package identity_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"math/big"
	"testing"
	"time"

	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/node/identity/identitytest"
)

// issueBetween signs template for pub with ca, valid from notBefore to
// notAfter.
func issueBetween(t testing.TB, ca *identitytest.CA, template x509.Certificate, pub ed25519.PublicKey, notBefore, notAfter time.Time) []byte {
	t.Helper()
	der, err := ca.Sign(template, pub, notBefore, notAfter)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

// expiredNode makes a node of ca whose certificate expired an hour ago.
func expiredNode(t testing.TB, ca *identitytest.CA) *identity.Node {
	t.Helper()
	key := mustKey(t)
	der := issueBetween(t, ca, identity.NodeCertificateTemplate(pub(key)), pub(key), time.Now().Add(-48*time.Hour), time.Now().Add(-time.Hour))
	return mustNode(t, key, der, ca.DER())
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
	key, err := identity.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func mustNode(t testing.TB, key ed25519.PrivateKey, certDER, caDER []byte) *identity.Node {
	t.Helper()
	n, err := identity.NewNode(key, certDER, caDER)
	if err != nil {
		t.Fatalf("NewNode: %v", err)
	}
	return n
}

func pub(key ed25519.PrivateKey) ed25519.PublicKey {
	return key.Public().(ed25519.PublicKey)
}
