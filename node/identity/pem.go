package identity

import (
	"bytes"
	"crypto/ed25519"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
)

// The PEM block types of a node bundle, in the order they appear.
var bundleBlocks = []string{"PRIVATE KEY", "CERTIFICATE", "CERTIFICATE"}

// ParseNodePEM reads a node identity from the bundle MarshalPEM writes:
// the private key (PKCS #8), the node certificate and the CA certificate,
// as three PEM blocks in that order and nothing else. It checks the result
// as NewNode does.
func ParseNodePEM(data []byte) (*Node, error) {
	var ders [][]byte
	rest := data
	for i, want := range bundleBlocks {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			return nil, fmt.Errorf("node bundle has %d PEM blocks, want %d", i, len(bundleBlocks))
		}
		if block.Type != want {
			return nil, fmt.Errorf("node bundle block %d is %q, want %q", i+1, block.Type, want)
		}
		if len(block.Headers) != 0 {
			return nil, fmt.Errorf("node bundle block %d has headers, want none", i+1)
		}
		ders = append(ders, block.Bytes)
	}
	if len(bytes.TrimSpace(rest)) != 0 {
		return nil, errors.New("node bundle has data after its last block")
	}
	parsed, err := x509.ParsePKCS8PrivateKey(ders[0])
	if err != nil {
		return nil, fmt.Errorf("when parsing node bundle private key: %w", err)
	}
	key, ok := parsed.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("node bundle private key is %T, want ed25519", parsed)
	}
	return NewNode(key, ders[1], ders[2])
}

// MarshalPEM writes the node identity as a bundle ParseNodePEM reads. The
// bundle holds the private key: keep it where only this node can read it.
func (n *Node) MarshalPEM() ([]byte, error) {
	keyDER, err := x509.MarshalPKCS8PrivateKey(n.key)
	if err != nil {
		return nil, fmt.Errorf("when marshalling private key: %w", err)
	}
	var buf bytes.Buffer
	for i, der := range [][]byte{keyDER, n.Certificate().Raw, n.ca.Raw} {
		if err := pem.Encode(&buf, &pem.Block{Type: bundleBlocks[i], Bytes: der}); err != nil {
			return nil, fmt.Errorf("when encoding PEM: %w", err)
		}
	}
	return buf.Bytes(), nil
}
