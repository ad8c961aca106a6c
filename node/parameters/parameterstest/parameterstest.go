// Package parameterstest makes valid node parameters for tests of the
// packages that read them.
package parameterstest

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"testing"
	"time"

	"cairn.dev/cairn/node/identity"
	api "cairn.dev/cairn/proto/api"
)

// DirectoryNode returns a cluster directory entry of a new random node at
// host.
func DirectoryNode(t testing.TB, host string) *api.ClusterDirectory_Node {
	t.Helper()
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return &api.ClusterDirectory_Node{
		Id:        identity.NodeID(pub),
		PublicKey: pub,
		Addresses: []*api.ClusterDirectory_Node_Address{{Host: host}},
	}
}

// Bootstrap returns bootstrap parameters with a random owner key.
func Bootstrap(t testing.TB) *api.NodeParameters {
	t.Helper()
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return &api.NodeParameters{Cluster: &api.NodeParameters_ClusterBootstrap_{
		ClusterBootstrap: &api.NodeParameters_ClusterBootstrap{OwnerPublicKey: pub},
	}}
}

// Register returns register parameters with a ticket, a new self-signed
// CA and a directory of one node at 10.0.2.15.
func Register(t testing.TB) *api.NodeParameters {
	t.Helper()
	return &api.NodeParameters{Cluster: &api.NodeParameters_ClusterRegister_{
		ClusterRegister: &api.NodeParameters_ClusterRegister{
			RegisterTicket: []byte("ticket"),
			CaCertificate:  CA(t),
			ClusterDirectory: &api.ClusterDirectory{Nodes: []*api.ClusterDirectory_Node{
				DirectoryNode(t, "10.0.2.15"),
			}},
		},
	}}
}

// CA returns a new self-signed CA certificate, DER.
func CA(t testing.TB) []byte {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, priv.Public(), priv)
	if err != nil {
		t.Fatal(err)
	}
	return der
}
