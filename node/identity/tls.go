package identity

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"time"
)

// ServerTLSConfig is the configuration of every TLS server of this node. It
// presents the node certificate and accepts clients of every PeerKind (see
// the package documentation), refusing every certificate that is neither
// valid under the cluster CA nor self-signed.
func (n *Node) ServerTLSConfig() *tls.Config {
	v := n.verifier
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		// The current certificate at each handshake: see Renew.
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			c := n.TLSCertificate()
			return &c, nil
		},
		// The handshake asks for a client certificate and leaves judging it
		// to VerifyConnection, as Go's own check would refuse self-signed
		// ones. ClientCAs stays empty on purpose: naming the CA in the
		// request would make clients withhold self-signed certificates.
		ClientAuth: tls.RequestClientCert,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if _, err := v.verify(cs.PeerCertificates, x509.ExtKeyUsageClientAuth, true); err != nil {
				return fmt.Errorf("refusing client: %w", err)
			}
			return nil
		},
	}
}

// ClientTLSConfig is the configuration with which this node dials other
// nodes. It presents the node certificate and accepts only servers holding
// a node certificate of the cluster CA.
func (n *Node) ClientTLSConfig() *tls.Config {
	c := clientConfig(n.verifier)
	// The current certificate at each handshake: see Renew.
	c.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
		c := n.TLSCertificate()
		return &c, nil
	}
	return c
}

// OwnerClientTLSConfig is the configuration with which the owner dials the
// cluster: key is the owner key, certDER the owner certificate the cluster
// issued for it and caDER the cluster CA certificate. It accepts only
// servers holding a node certificate of that CA.
func OwnerClientTLSConfig(key ed25519.PrivateKey, certDER, caDER []byte) (*tls.Config, error) {
	return certifiedClientConfig(PeerOwner, key, certDER, caDER)
}

// MetricsClientTLSConfig is OwnerClientTLSConfig for a scraper of the
// nodes' metrics, with its key and the metrics certificate the cluster
// issued for it.
func MetricsClientTLSConfig(key ed25519.PrivateKey, certDER, caDER []byte) (*tls.Config, error) {
	return certifiedClientConfig(PeerMetrics, key, certDER, caDER)
}

// certifiedClientConfig presents certDER, a certificate of kind for key,
// and accepts only servers holding a node certificate of caDER's CA.
func certifiedClientConfig(kind PeerKind, key ed25519.PrivateKey, certDER, caDER []byte) (*tls.Config, error) {
	ca, err := parseCA(caDER)
	if err != nil {
		return nil, err
	}
	cert, peer, err := parseLeaf(key, certDER, ca)
	if err != nil {
		return nil, fmt.Errorf("when checking %s certificate: %w", kind, err)
	}
	if peer.Kind != kind {
		return nil, fmt.Errorf("certificate %q identifies a peer of kind %s, want %s", cert.Subject.CommonName, peer.Kind, kind)
	}
	return clientConfig(newVerifier(ca), tls.Certificate{
		Certificate: [][]byte{cert.Raw},
		PrivateKey:  key,
		Leaf:        cert,
	}), nil
}

// EphemeralClientTLSConfig is the configuration of a client that has no
// certificate of the cluster yet: a node registering, or an operator taking
// ownership. It pins the cluster CA of caDER, accepting only servers holding
// a node certificate of that CA. With a key, it presents a self-signed
// certificate of that key, proving to the server that the client holds it
// (PeerSelfSigned); with a nil key it presents nothing (PeerAnonymous).
func EphemeralClientTLSConfig(caDER []byte, key ed25519.PrivateKey) (*tls.Config, error) {
	ca, err := parseCA(caDER)
	if err != nil {
		return nil, err
	}
	var certs []tls.Certificate
	if key != nil {
		cert, err := selfSigned(key)
		if err != nil {
			return nil, err
		}
		certs = append(certs, cert)
	}
	return clientConfig(newVerifier(ca), certs...), nil
}

// clientConfig accepts only servers holding a node certificate valid under
// v's CA, and presents certs.
func clientConfig(v *verifier, certs ...tls.Certificate) *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: certs,
		// Go's own check would compare the server's certificate with the
		// dialled host name. Nodes are dialled by address and any node of
		// the cluster may answer, so VerifyConnection checks the
		// certificate instead, against the cluster CA and nothing else.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			peer, err := v.verify(cs.PeerCertificates, x509.ExtKeyUsageServerAuth, false)
			if err != nil {
				return fmt.Errorf("refusing server: %w", err)
			}
			if peer.Kind != PeerNode {
				return fmt.Errorf("refusing server: it is a peer of kind %s, want node", peer.Kind)
			}
			return nil
		},
	}
}

// selfSigned makes a certificate of key signed by key itself. Its only use
// is to carry the key through a handshake, so its validity period spans all
// time (RFC 5280's "no well-defined expiration date").
func selfSigned(key ed25519.PrivateKey) (tls.Certificate, error) {
	if err := checkPrivateKey(key); err != nil {
		return tls.Certificate{}, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("when choosing serial number: %w", err)
	}
	template := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "self-signed"},
		NotBefore:    time.Unix(0, 0).UTC(),
		NotAfter:     time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, template, template, key.Public(), key)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("when creating self-signed certificate: %w", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("when parsing self-signed certificate: %w", err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, nil
}
