package identity

import (
	"crypto/ed25519"
	"crypto/tls"
	"crypto/x509"
	"fmt"
)

// Node is a node's identity: its private key, the certificate the cluster
// CA issued for that key, and the CA certificate. It is immutable and safe
// for concurrent use.
type Node struct {
	key      ed25519.PrivateKey
	cert     *x509.Certificate
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
	return &Node{
		key:      key,
		cert:     cert,
		ca:       ca,
		id:       peer.NodeID,
		verifier: newVerifier(ca),
	}, nil
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
func (n *Node) Certificate() *x509.Certificate { return n.cert }

// CACertificate returns the cluster CA certificate.
func (n *Node) CACertificate() *x509.Certificate { return n.ca }

// TLSCertificate returns the node's certificate and key in the form
// crypto/tls takes them.
func (n *Node) TLSCertificate() tls.Certificate {
	return tls.Certificate{
		Certificate: [][]byte{n.cert.Raw},
		PrivateKey:  n.key,
		Leaf:        n.cert,
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
