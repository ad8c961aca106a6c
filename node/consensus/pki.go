package consensus

import (
	"context"
	"crypto"
	"crypto/ed25519"
	"fmt"
	"net"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"cairn.dev/cairn/pkg/pki"
)

// PKINamespace is where, in etcd's key space, the cluster's CA and the
// certificates it issued are kept.
var PKINamespace = &pki.Namespace{Prefix: "pki/"}

// PeerPKINamespace is where, apart from the cluster CA's, etcd's peer CA,
// the peer certificates it issued and their revocations are kept.
var PeerPKINamespace = &pki.Namespace{Prefix: "etcd-peer-pki/"}

// ClusterCA describes the cluster's CA: the CA of node and owner
// certificates, which secures every connection in the cluster but those
// between etcd's peers (see the package documentation). It is created when
// the cluster is bootstrapped.
func ClusterCA() *pki.Certificate { return rootCA(PKINamespace, "Cairn cluster CA") }

// peerCA describes etcd's peer CA. It issues the peer certificates of etcd
// members and nothing else, and it is the only CA etcd's peer port trusts:
// a node or owner certificate, or any other certificate of the cluster CA,
// fails the handshake there. A removed member's peer certificate is
// revoked on its CRL. It is created when the cluster is bootstrapped.
func peerCA() *pki.Certificate { return rootCA(PeerPKINamespace, "Cairn etcd peer CA") }

// rootCA describes a self-signed CA called cn, kept as "ca" in ns, whose
// key any member can read (and sign with).
func rootCA(ns *pki.Namespace, cn string) *pki.Certificate {
	return &pki.Certificate{
		Namespace: ns,
		Issuer:    pki.SelfSigned,
		Name:      "ca",
		Template:  pki.CA(cn),
		Mode:      pki.ManagedKey,
	}
}

// PeerCertificateLifetime is the lifetime of etcd peer certificates. A
// member renews its own once half of it has passed (runPeerRenewal); it is
// long because a member powered off for longer cannot renew, and its peers
// would refuse it until it is added again. Removed members are refused at
// once by the CRL: the lifetime is the backstop, not the means.
const PeerCertificateLifetime = 365 * 24 * time.Hour

// peerCertificate describes the etcd peer certificate of member name on ip,
// for the node's own key, issued by ca (peerCA).
func peerCertificate(ca *pki.Certificate, name string, ip net.IP, pub crypto.PublicKey) *pki.Certificate {
	return &pki.Certificate{
		Namespace: PeerPKINamespace,
		Issuer:    ca,
		Name:      peerCertificateName(name),
		Template:  pki.Peer(name, []net.IP{ip}),
		Mode:      pki.ExternalKey,
		PublicKey: pub.(ed25519.PublicKey),
		Lifetime:  peerLifetime,
	}
}

// peerLifetime is PeerCertificateLifetime; tests shorten it.
var peerLifetime = PeerCertificateLifetime

// peerCertificateName is the name, in PeerPKINamespace, of the peer
// certificate of member name.
func peerCertificateName(name string) string { return "etcd-peer-" + name }

// issuePeer issues (or returns the already issued) peer certificate of
// member name on ip for pub, creating the peer CA first if need be, and
// returns what the member's peer TLS files hold, DER: the peer CA's
// certificate, the peer certificate and the peer CA's current CRL.
func issuePeer(ctx context.Context, kv clientv3.KV, name string, ip net.IP, pub crypto.PublicKey) (caDER, peerDER, crlDER []byte, err error) {
	ca := peerCA()
	if caDER, err = ca.Ensure(ctx, kv); err != nil {
		return nil, nil, nil, fmt.Errorf("when ensuring the peer CA: %w", err)
	}
	if peerDER, err = peerCertificate(ca, name, ip, pub).EnsureFresh(ctx, kv); err != nil {
		return nil, nil, nil, fmt.Errorf("when issuing peer certificate: %w", err)
	}
	if crlDER, err = ca.CRL(ctx, kv); err != nil {
		return nil, nil, nil, fmt.Errorf("when signing peer CRL: %w", err)
	}
	return caDER, peerDER, crlDER, nil
}
