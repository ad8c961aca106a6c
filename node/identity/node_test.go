package identity_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/node/identity/identitytest"
)

func TestNewNode(t *testing.T) {
	ca := identitytest.NewCA(t, "cluster CA")
	foreign := identitytest.NewCA(t, "foreign CA")
	key := mustKey(t)
	otherKey := mustKey(t)
	valid := ca.Issue(t, identity.NodeCertificateTemplate(pub(key)), pub(key))

	n, err := identity.NewNode(key, valid, ca.DER())
	if err != nil {
		t.Fatalf("NewNode(valid) = %v", err)
	}
	if got, want := n.ID(), identity.NodeID(pub(key)); got != want {
		t.Errorf("ID() = %q, want %q", got, want)
	}
	if !n.PublicKey().Equal(pub(key)) {
		t.Errorf("PublicKey() = %x, want %x", n.PublicKey(), pub(key))
	}
	if !n.CACertificate().Equal(ca.Cert) {
		t.Errorf("CACertificate() is not the CA certificate")
	}
	if got := n.TLSCertificate().Leaf; !got.Equal(n.Certificate()) {
		t.Errorf("TLSCertificate().Leaf is not Certificate()")
	}

	// A certificate naming the ID of another key.
	misnamed := identity.NodeCertificateTemplate(pub(otherKey))
	// A node certificate without its DNS name.
	nameless := identity.NodeCertificateTemplate(pub(key))
	nameless.DNSNames = nil
	// A node certificate without the server usage.
	clientOnly := identity.NodeCertificateTemplate(pub(key))
	clientOnly.ExtKeyUsage = clientOnly.ExtKeyUsage[1:]
	// Both markers at once.
	twoUnits := identity.NodeCertificateTemplate(pub(key))
	twoUnits.Subject.OrganizationalUnit = []string{identity.NodeUnit, identity.OwnerUnit}
	// A key whose public half does not match its seed.
	badKey := append(append([]byte{}, key.Seed()...), pub(otherKey)...)

	for _, tc := range []struct {
		name    string
		key     []byte
		cert    []byte
		ca      []byte
		wantErr string
	}{
		{"other key", otherKey, valid, ca.DER(), "not for this private key"},
		{"foreign CA", key, valid, foreign.DER(), "not issued by the cluster CA"},
		{"issued by foreign CA", key, foreign.Issue(t, identity.NodeCertificateTemplate(pub(key)), pub(key)), ca.DER(), "not issued by the cluster CA"},
		{"owner certificate", key, ca.Issue(t, identity.OwnerCertificateTemplate(), pub(key)), ca.DER(), "want node"},
		{"CN of another key", key, ca.Issue(t, misnamed, pub(key)), ca.DER(), "not the ID of its key"},
		{"no DNS name", key, ca.Issue(t, nameless, pub(key)), ca.DER(), "lack its ID"},
		{"no server usage", key, ca.Issue(t, clientOnly, pub(key)), ca.DER(), "extended key usage"},
		{"two OUs", key, ca.Issue(t, twoUnits, pub(key)), ca.DER(), "is none of"},
		{"garbage CA", key, valid, []byte("not a certificate"), "parsing CA certificate"},
		{"CA is not a CA", key, valid, valid, "not marked as a CA"},
		{"garbage certificate", key, []byte{0x30, 0x03, 0x02, 0x01}, ca.DER(), "parsing certificate"},
		{"short key", key[:32], valid, ca.DER(), "want 64"},
		{"inconsistent key", badKey, valid, ca.DER(), "does not match its seed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := identity.NewNode(tc.key, tc.cert, tc.ca)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("NewNode() = %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestNewNodeAcceptsAnyValidityPeriod(t *testing.T) {
	ca := identitytest.NewCA(t, "cluster CA")
	for _, tc := range []struct {
		name                string
		notBefore, notAfter time.Time
	}{
		{"expired", time.Now().Add(-48 * time.Hour), time.Now().Add(-time.Hour)},
		{"not yet valid", time.Now().Add(time.Hour), time.Now().Add(48 * time.Hour)},
	} {
		key := mustKey(t)
		der := issueBetween(t, ca, identity.NodeCertificateTemplate(pub(key)), pub(key), tc.notBefore, tc.notAfter)
		if _, err := identity.NewNode(key, der, ca.DER()); err != nil {
			t.Errorf("NewNode(%s certificate) = %v, want no error: handshakes judge the period", tc.name, err)
		}
	}
}

func TestNodePEMRoundTrip(t *testing.T) {
	n := identitytest.NewCA(t, "cluster CA").Node(t)
	bundle, err := n.MarshalPEM()
	if err != nil {
		t.Fatalf("MarshalPEM: %v", err)
	}
	got, err := identity.ParseNodePEM(bundle)
	if err != nil {
		t.Fatalf("ParseNodePEM(MarshalPEM()) = %v", err)
	}
	if diff := cmp.Diff(n.PrivateKey(), got.PrivateKey()); diff != "" {
		t.Errorf("private key changed in the round trip (-want +got):\n%s", diff)
	}
	if !got.Certificate().Equal(n.Certificate()) || !got.CACertificate().Equal(n.CACertificate()) {
		t.Errorf("certificates changed in the round trip")
	}
}

func TestParseNodePEMRefuses(t *testing.T) {
	n := identitytest.NewCA(t, "cluster CA").Node(t)
	bundle, err := n.MarshalPEM()
	if err != nil {
		t.Fatalf("MarshalPEM: %v", err)
	}
	blocks := splitPEM(t, bundle)
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ecDER, err := x509.MarshalPKCS8PrivateKey(ecKey)
	if err != nil {
		t.Fatal(err)
	}
	withHeader := *blocks[0]
	withHeader.Headers = map[string]string{"Proc-Type": "4,ENCRYPTED"}

	for _, tc := range []struct {
		name    string
		bundle  []byte
		wantErr string
	}{
		{"empty", nil, "has 0 PEM blocks"},
		{"key only", joinPEM(blocks[0]), "has 1 PEM blocks"},
		{"wrong order", joinPEM(blocks[1], blocks[0], blocks[2]), `is "CERTIFICATE", want "PRIVATE KEY"`},
		{"trailing data", append(bytes.Clone(bundle), "trailing"...), "after its last block"},
		{"fourth block", append(bytes.Clone(bundle), pem.EncodeToMemory(blocks[2])...), "after its last block"},
		{"headers", joinPEM(&withHeader, blocks[1], blocks[2]), "has headers"},
		{"ECDSA key", joinPEM(&pem.Block{Type: "PRIVATE KEY", Bytes: ecDER}, blocks[1], blocks[2]), "want ed25519"},
		{"garbage key", joinPEM(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte{1, 2, 3}}, blocks[1], blocks[2]), "private key"},
		{"CA as node", joinPEM(blocks[0], blocks[2], blocks[2]), "not for this private key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := identity.ParseNodePEM(tc.bundle)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ParseNodePEM() = %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}

func splitPEM(t *testing.T, data []byte) []*pem.Block {
	t.Helper()
	var blocks []*pem.Block
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			return blocks
		}
		blocks = append(blocks, b)
	}
}

func joinPEM(blocks ...*pem.Block) []byte {
	var out []byte
	for _, b := range blocks {
		out = append(out, pem.EncodeToMemory(b)...)
	}
	return out
}
