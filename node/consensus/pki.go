package consensus

import (
	"crypto"
	"crypto/ed25519"
	"net"

	"cairn.dev/cairn/pkg/pki"
)

// PKINamespace is where, in etcd's key space, the cluster's CA and the
// certificates it issued are kept.
var PKINamespace = &pki.Namespace{Prefix: "pki/"}

// ClusterCA describes the cluster's CA: the one CA that secures etcd's peers
// and, through the rest of the node, every other connection in the cluster.
// It is created when the cluster is bootstrapped.
func ClusterCA() *pki.Certificate {
	return &pki.Certificate{
		Namespace: PKINamespace,
		Issuer:    pki.SelfSigned,
		Name:      "ca",
		Template:  pki.CA("Cairn cluster CA"),
		Mode:      pki.ManagedKey,
	}
}

// peerCertificate describes the etcd peer certificate of member name on ip,
// for the node's own key.
func peerCertificate(name string, ip net.IP, pub crypto.PublicKey) *pki.Certificate {
	return &pki.Certificate{
		Namespace: PKINamespace,
		Issuer:    ClusterCA(),
		Name:      "etcd-peer-" + name,
		Template:  pki.Peer(name, []net.IP{ip}),
		Mode:      pki.ExternalKey,
		PublicKey: pub.(ed25519.PublicKey),
	}
}
