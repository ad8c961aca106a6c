package identity

import (
	"crypto/ed25519"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"time"
)

// The markers of the certificate profile (see the package documentation).
const (
	// NodeUnit is the Subject OU of every node certificate.
	NodeUnit = "node"
	// OwnerUnit is the Subject OU of every owner certificate.
	OwnerUnit = "owner"
	// MetricsUnit is the Subject OU of every metrics certificate.
	MetricsUnit = "metrics"
	// OwnerCommonName is the Subject CN of every owner certificate.
	OwnerCommonName = "owner"
)

// PeerKind says what the other end of a connection proved to be.
type PeerKind int

const (
	// PeerAnonymous presented no certificate. It is the zero value, so a
	// Peer nobody filled in has the least standing.
	PeerAnonymous PeerKind = iota
	// PeerSelfSigned presented a self-signed certificate: it holds the
	// certificate's key, and nothing more is known about it.
	PeerSelfSigned
	// PeerNode presented a node certificate of the cluster CA.
	PeerNode
	// PeerOwner presented the owner certificate of the cluster CA.
	PeerOwner
	// PeerMetrics presented a metrics certificate of the cluster CA: it
	// may read the nodes' metrics, and nothing else.
	PeerMetrics
)

// String names the kind for logs and errors.
func (k PeerKind) String() string {
	switch k {
	case PeerAnonymous:
		return "anonymous"
	case PeerSelfSigned:
		return "self-signed"
	case PeerNode:
		return "node"
	case PeerOwner:
		return "owner"
	case PeerMetrics:
		return "metrics"
	}
	return fmt.Sprintf("PeerKind(%d)", int(k))
}

// Peer is the authenticated other end of a TLS connection.
type Peer struct {
	// Kind is what the peer proved to be.
	Kind PeerKind
	// NodeID is the peer's node ID when Kind is PeerNode, else "".
	NodeID string
	// PublicKey is the key the peer proved to hold; nil for PeerAnonymous.
	PublicKey ed25519.PublicKey
	// Serial is the serial number of the certificate of the cluster CA
	// the peer presented (PeerNode, PeerOwner), by which a certificate is
	// revoked; nil for the other kinds. Read only.
	Serial *big.Int
	// NotAfter is when that certificate expires; zero for the other
	// kinds.
	NotAfter time.Time
}

// NodeCertificateTemplate returns the profile fields of the certificate of
// the node holding pub. The issuer adds the serial number and the validity
// period, and signs it with the cluster CA for pub.
func NodeCertificateTemplate(pub ed25519.PublicKey) x509.Certificate {
	id := NodeID(pub)
	return x509.Certificate{
		Subject: pkix.Name{
			CommonName:         id,
			OrganizationalUnit: []string{NodeUnit},
		},
		DNSNames:              []string{id},
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
	}
}

// OwnerCertificateTemplate returns the profile fields of the owner's
// certificate. The issuer adds the serial number and the validity period,
// and signs it with the cluster CA for the owner's key.
func OwnerCertificateTemplate() x509.Certificate {
	return x509.Certificate{
		Subject: pkix.Name{
			CommonName:         OwnerCommonName,
			OrganizationalUnit: []string{OwnerUnit},
		},
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
	}
}

// MetricsCertificateTemplate returns the profile fields of a metrics
// certificate for a scraper called name. The issuer adds the serial
// number and the validity period, and signs it with the cluster CA.
func MetricsCertificateTemplate(name string) x509.Certificate {
	return x509.Certificate{
		Subject: pkix.Name{
			CommonName:         name,
			OrganizationalUnit: []string{MetricsUnit},
		},
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
	}
}

// classify reads which profile a certificate follows. It judges only the
// fields; whether the cluster CA signed it is for the caller to check.
func classify(cert *x509.Certificate) (Peer, error) {
	pub, ok := cert.PublicKey.(ed25519.PublicKey)
	if !ok {
		return Peer{}, fmt.Errorf("certificate key is %T, want ed25519", cert.PublicKey)
	}
	if cert.IsCA {
		return Peer{}, errors.New("certificate is a CA certificate")
	}
	units := cert.Subject.OrganizationalUnit
	switch {
	case slices.Equal(units, []string{NodeUnit}):
		return classifyNode(cert, pub)
	case slices.Equal(units, []string{OwnerUnit}):
		return classifyOwner(cert, pub)
	case slices.Equal(units, []string{MetricsUnit}):
		if cert.Subject.CommonName == "" || !slices.Contains(cert.ExtKeyUsage, x509.ExtKeyUsageClientAuth) {
			return Peer{}, errors.New("metrics certificate lacks a name or the client authentication usage")
		}
		return Peer{Kind: PeerMetrics, PublicKey: pub, Serial: cert.SerialNumber, NotAfter: cert.NotAfter}, nil
	}
	return Peer{}, fmt.Errorf("certificate OU %q is none of [%q], [%q] and [%q]", units, NodeUnit, OwnerUnit, MetricsUnit)
}

func classifyNode(cert *x509.Certificate, pub ed25519.PublicKey) (Peer, error) {
	id := NodeID(pub)
	if cert.Subject.CommonName != id {
		return Peer{}, fmt.Errorf("node certificate CN %q is not the ID of its key, %q", cert.Subject.CommonName, id)
	}
	if !slices.Contains(cert.DNSNames, id) {
		return Peer{}, fmt.Errorf("node certificate DNS names %q lack its ID %q", cert.DNSNames, id)
	}
	for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		if !slices.Contains(cert.ExtKeyUsage, usage) {
			return Peer{}, fmt.Errorf("node certificate %q lacks extended key usage %d", id, usage)
		}
	}
	return Peer{Kind: PeerNode, NodeID: id, PublicKey: pub, Serial: cert.SerialNumber, NotAfter: cert.NotAfter}, nil
}

func classifyOwner(cert *x509.Certificate, pub ed25519.PublicKey) (Peer, error) {
	if cert.Subject.CommonName != OwnerCommonName {
		return Peer{}, fmt.Errorf("owner certificate CN is %q, want %q", cert.Subject.CommonName, OwnerCommonName)
	}
	if !slices.Contains(cert.ExtKeyUsage, x509.ExtKeyUsageClientAuth) {
		return Peer{}, errors.New("owner certificate lacks the client authentication usage")
	}
	return Peer{Kind: PeerOwner, PublicKey: pub, Serial: cert.SerialNumber, NotAfter: cert.NotAfter}, nil
}
