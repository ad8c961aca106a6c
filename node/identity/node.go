package identity

import (
	"crypto/ed25519"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"sync/atomic"
	"time"
)

// Node is a node's identity: its private key, the certificate the cluster
// CA issued for that key, and the CA certificate. Only the certificate
// changes, when Renew replaces it; the TLS configurations of a Node present
// the current one at each handshake, so a renewal restarts nothing. It is
// safe for concurrent use.
type Node struct {
	key      ed25519.PrivateKey
	cert     atomic.Pointer[x509.Certificate]
	ca       *x509.Certificate
	id       string
	verifier *verifier
}

// NewNode checks that certDER is a node certificate for key, issued by the
// CA of caDER, and returns the identity they make up.
//
// It does not judge the certificate's validity period: early in boot the
// clock may still be wrong, and every handshake checks the period anyway,
// on both ends.
func NewNode(key ed25519.PrivateKey, certDER, caDER []byte) (*Node, error) {
	ca, err := parseCA(caDER)
	if err != nil {
		return nil, err
	}
	cert, peer, err := parseLeaf(key, certDER, ca)
	if err != nil {
		return nil, fmt.Errorf("when checking node certificate: %w", err)
	}
	if peer.Kind != PeerNode {
		return nil, fmt.Errorf("certificate %q identifies a peer of kind %s, want node", cert.Subject.CommonName, peer.Kind)
	}
	n := &Node{
		key:      key,
		ca:       ca,
		id:       peer.NodeID,
		verifier: newVerifier(ca),
	}
	n.cert.Store(cert)
	return n, nil
}

// Renew makes certDER the node's certificate from now on, once it has
// checked that it is a node certificate of the same CA for the same key
// and that it ends later than the current one (a late answer to an older
// request never replaces a newer certificate). Connections already made
// keep the certificate they were made with.
func (n *Node) Renew(certDER []byte) error {
	cert, peer, err := parseLeaf(n.key, certDER, n.ca)
	if err != nil {
		return fmt.Errorf("when checking the renewed certificate: %w", err)
	}
	if peer.Kind != PeerNode || peer.NodeID != n.id {
		return fmt.Errorf("the renewed certificate %q is not a node certificate of %s", cert.Subject.CommonName, n.id)
	}
	for {
		old := n.cert.Load()
		if !cert.NotAfter.After(old.NotAfter) {
			return fmt.Errorf("the renewed certificate ends at %s, not after the current one (%s)", cert.NotAfter.UTC().Format(time.RFC3339), old.NotAfter.UTC().Format(time.RFC3339))
		}
		if n.cert.CompareAndSwap(old, cert) {
			return nil
		}
	}
}

// ID returns the node's ID.
func (n *Node) ID() string { return n.id }

// PublicKey returns the node's public key.
func (n *Node) PublicKey() ed25519.PublicKey {
	return n.key.Public().(ed25519.PublicKey)
}

// PrivateKey returns the node's private key. It must not leave the node.
func (n *Node) PrivateKey() ed25519.PrivateKey { return n.key }

// Certificate returns the node's certificate.
func (n *Node) Certificate() *x509.Certificate { return n.cert.Load() }

// CACertificate returns the cluster CA certificate.
func (n *Node) CACertificate() *x509.Certificate { return n.ca }

// TLSCertificate returns the node's certificate and key in the form
// crypto/tls takes them.
func (n *Node) TLSCertificate() tls.Certificate {
	cert := n.cert.Load()
	return tls.Certificate{
		Certificate: [][]byte{cert.Raw},
		PrivateKey:  n.key,
		Leaf:        cert,
	}
}

// PeerIdentity tells who the peer of a connection is, from the
// certificates it presented, judged against this node's cluster CA. It is
// meant for servers built on ServerTLSConfig, whose handshakes already
// refused every peer it would fail on; it judges again because the
// connection state alone does not say which configuration made it.
func (n *Node) PeerIdentity(cs tls.ConnectionState) (Peer, error) {
	return n.verifier.verify(cs.PeerCertificates, x509.ExtKeyUsageAny, true)
}
