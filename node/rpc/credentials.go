package rpc

import (
	"crypto/ed25519"
	"crypto/tls"
	"errors"
	"fmt"

	"google.golang.org/grpc/credentials"

	"cairn.dev/cairn/node/identity"
)

// NodeCredentials are the TLS credentials with which node dials other
// nodes: it presents its node certificate (AUTHORIZATION_NODE) and accepts
// only servers holding a node certificate of its cluster CA.
func NodeCredentials(node *identity.Node) credentials.TransportCredentials {
	return credentials.NewTLS(node.ClientTLSConfig())
}

// OwnerCredentials are the TLS credentials with which the owner dials the
// cluster: key is the owner key, certDER the owner certificate and caDER
// the cluster CA certificate. The owner is admitted to
// AUTHORIZATION_OWNER methods.
func OwnerCredentials(key ed25519.PrivateKey, certDER, caDER []byte) (credentials.TransportCredentials, error) {
	c, err := identity.OwnerClientTLSConfig(key, certDER, caDER)
	if err != nil {
		return nil, fmt.Errorf("when building owner credentials: %w", err)
	}
	return credentials.NewTLS(c), nil
}

// NodeManagementCredentials are the TLS credentials with which the owner
// dials the management service (NodeManagement) of one node, wantNodeID:
// OwnerCredentials that accept, of all the cluster's nodes, only that one.
// Any node of the cluster could otherwise answer for another, and a
// misdirected endpoint would reboot or read the logs of the wrong machine.
// A server holding another node's certificate is refused in the TLS
// handshake, before any request leaves, with a *WrongNodeError.
func NodeManagementCredentials(key ed25519.PrivateKey, certDER, caDER []byte, wantNodeID string) (credentials.TransportCredentials, error) {
	if !identity.ValidNodeID(wantNodeID) {
		return nil, fmt.Errorf("when building node management credentials: %q is not a node ID", wantNodeID)
	}
	c, err := identity.OwnerClientTLSConfig(key, certDER, caDER)
	if err != nil {
		return nil, fmt.Errorf("when building node management credentials: %w", err)
	}
	cluster := c.VerifyConnection
	c.VerifyConnection = func(cs tls.ConnectionState) error {
		// First the cluster's check: a node certificate of the cluster
		// CA, whose name is the ID of its key.
		if err := cluster(cs); err != nil {
			return err
		}
		pub, ok := cs.PeerCertificates[0].PublicKey.(ed25519.PublicKey)
		if !ok {
			return fmt.Errorf("refusing server: its key is %T, want ed25519", cs.PeerCertificates[0].PublicKey)
		}
		if got := identity.NodeID(pub); got != wantNodeID {
			return &WrongNodeError{Want: wantNodeID, Got: got}
		}
		return nil
	}
	return credentials.NewTLS(c), nil
}

// WrongNodeError is how NodeManagementCredentials refuse a server that
// holds a valid node certificate of the cluster, but another node's.
type WrongNodeError struct {
	// Want is the ID of the node the client meant to reach.
	Want string
	// Got is the ID of the node that answered.
	Got string
}

// Error names both nodes.
func (e *WrongNodeError) Error() string {
	return fmt.Sprintf("refusing server: it answered as %s, not %s", e.Got, e.Want)
}

// EphemeralCredentials are the TLS credentials of a client without a
// certificate of the cluster: a node registering, committing or joining,
// or an operator taking ownership. They pin the cluster CA of caDER. With
// a key they present a self-signed certificate of it, proving to the
// server that the client holds the key; with a nil key they present
// nothing. Either way the client is admitted only to the
// AUTHORIZATION_UNAUTHENTICATED_* methods.
func EphemeralCredentials(caDER []byte, key ed25519.PrivateKey) (credentials.TransportCredentials, error) {
	c, err := identity.EphemeralClientTLSConfig(caDER, key)
	if err != nil {
		return nil, fmt.Errorf("when building ephemeral credentials: %w", err)
	}
	return credentials.NewTLS(c), nil
}

// Escrow proofs (see AAA.Escrow in proto/api/aaa.proto) sign these bytes.
const (
	escrowProofPrefix   = "cairn escrow proof v1\x00"
	escrowExporterLabel = "EXPORTER-cairn-escrow"
	escrowNonceSize     = 32
	escrowExporterSize  = 32
)

// EscrowNonceSize is the length of the nonce the server sends in an
// escrow challenge.
const EscrowNonceSize = escrowNonceSize

// EscrowProofPayload returns the bytes the owner signs, and the curator
// checks the signature of, in AAA.Escrow: a fixed prefix, the server's
// nonce and keying material exported from the TLS session cs, so that a
// proof holds for one challenge on one connection. Both ends compute it
// from their own side of the connection (TLSConnectionState).
func EscrowProofPayload(nonce []byte, cs tls.ConnectionState) ([]byte, error) {
	if len(nonce) != escrowNonceSize {
		return nil, fmt.Errorf("escrow nonce is %d bytes, want %d", len(nonce), escrowNonceSize)
	}
	ekm, err := exportKeyingMaterial(cs, escrowExporterLabel)
	if err != nil {
		return nil, err
	}
	payload := make([]byte, 0, len(escrowProofPrefix)+len(nonce)+len(ekm))
	payload = append(payload, escrowProofPrefix...)
	payload = append(payload, nonce...)
	payload = append(payload, ekm...)
	return payload, nil
}

// Proofs of a new owner key in Management.RotateOwnerKey sign these bytes.
// Prefix and label differ from Escrow's: neither proof passes for the
// other.
const (
	rotationProofPrefix   = "cairn owner key rotation proof v1\x00"
	rotationExporterLabel = "EXPORTER-cairn-owner-rotation"
)

// OwnerRotationProofPayload returns the bytes the new owner key signs, and
// the curator checks the signature of, in Management.RotateOwnerKey: a
// fixed prefix, the current owner key (the caller's certificate's), the
// new one, and keying material exported from the TLS session cs. The proof
// holds for this rotation, from this key to that one, on this connection
// only; as for Escrow, both ends compute it from their own side.
func OwnerRotationProofPayload(current, next ed25519.PublicKey, cs tls.ConnectionState) ([]byte, error) {
	for _, k := range []struct {
		name string
		key  ed25519.PublicKey
	}{{"current", current}, {"new", next}} {
		if len(k.key) != ed25519.PublicKeySize {
			return nil, fmt.Errorf("the %s owner key is %d bytes, want %d", k.name, len(k.key), ed25519.PublicKeySize)
		}
	}
	ekm, err := exportKeyingMaterial(cs, rotationExporterLabel)
	if err != nil {
		return nil, err
	}
	payload := make([]byte, 0, len(rotationProofPrefix)+2*ed25519.PublicKeySize+len(ekm))
	payload = append(payload, rotationProofPrefix...)
	payload = append(payload, current...)
	payload = append(payload, next...)
	payload = append(payload, ekm...)
	return payload, nil
}

// exportKeyingMaterial exports escrowExporterSize bytes of keying material
// of the TLS session cs under label, with no context (RFC 8446 section
// 7.5).
func exportKeyingMaterial(cs tls.ConnectionState, label string) ([]byte, error) {
	if !cs.HandshakeComplete {
		return nil, errors.New("TLS handshake is not complete, no keying material to bind to")
	}
	ekm, err := cs.ExportKeyingMaterial(label, nil, escrowExporterSize)
	if err != nil {
		return nil, fmt.Errorf("when exporting TLS keying material: %w", err)
	}
	return ekm, nil
}
