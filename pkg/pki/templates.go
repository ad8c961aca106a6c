package pki

import (
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"net"
	"time"
)

// NoExpiry is the NotAfter of certificates that do not expire: RFC 5280,
// section 4.1.2.5, reserves 99991231235959Z for that.
var NoExpiry = time.Date(9999, time.December, 31, 23, 59, 59, 0, time.UTC)

// clockSkew is how far into the past a fresh certificate's NotBefore is set,
// so that a node whose clock is slightly behind the issuer's accepts it.
const clockSkew = 5 * time.Minute

// NewSerial returns a fresh serial number: 127 bits of which 126 are
// random, always positive and never zero, as RFC 5280 asks.
func NewSerial() (*big.Int, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("when generating serial: %w", err)
	}
	b[0] &= 0x7f // positive
	b[0] |= 0x40 // never zero, and always 16 bytes long once encoded
	return new(big.Int).SetBytes(b[:]), nil
}

// fillValidity fills in a zero validity period: from clockSkew ago (a
// tenth of a short lifetime at most, so that the skew never dominates it)
// until lifetime from now or, when lifetime is zero, for ever.
func fillValidity(tmpl *x509.Certificate, lifetime time.Duration) {
	now := time.Now()
	if tmpl.NotBefore.IsZero() {
		skew := clockSkew
		if lifetime > 0 {
			skew = min(skew, lifetime/10)
		}
		tmpl.NotBefore = now.Add(-skew)
	}
	if tmpl.NotAfter.IsZero() {
		tmpl.NotAfter = NoExpiry
		if lifetime > 0 {
			tmpl.NotAfter = now.Add(lifetime)
		}
	}
}

// CA is the template of a certificate authority called cn, which signs
// certificates and CRLs and nothing else.
func CA(cn string) x509.Certificate {
	return x509.Certificate{
		Subject:               pkix.Name{CommonName: cn},
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
}

// Server is the template of a TLS server certificate for the node or
// service id, valid for the DNS name id and the given IPs.
func Server(id string, ips []net.IP) x509.Certificate {
	return x509.Certificate{
		Subject:     pkix.Name{CommonName: id},
		DNSNames:    []string{id},
		IPAddresses: ips,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
}

// Peer is Server for a party that both accepts and makes connections to
// its peers with the same certificate, like an etcd member.
func Peer(id string, ips []net.IP) x509.Certificate {
	t := Server(id, ips)
	t.ExtKeyUsage = append(t.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	return t
}

// Client is the template of a TLS client certificate identifying id.
func Client(id string) x509.Certificate {
	return x509.Certificate{
		Subject:     pkix.Name{CommonName: id},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
}
