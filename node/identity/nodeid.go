package identity

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
)

// NodeIDPrefix starts every node ID.
const NodeIDPrefix = "cairn-"

// nodeIDKeyBytes is how many leading bytes of the public key a node ID
// carries.
const nodeIDKeyBytes = 8

// GenerateKey makes a new ed25519 node key from the system's randomness.
func GenerateKey() (ed25519.PrivateKey, error) {
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("when generating ed25519 key: %w", err)
	}
	return key, nil
}

// NodeID is the ID of the node holding pub: NodeIDPrefix followed by the
// lowercase hex of the key's first 8 bytes, like "cairn-d75a980182b10ab7".
// It returns "" for anything that is not an ed25519 public key, so that an
// ID derived from bad bytes never names a node.
func NodeID(pub ed25519.PublicKey) string {
	if len(pub) != ed25519.PublicKeySize {
		return ""
	}
	return NodeIDPrefix + hex.EncodeToString(pub[:nodeIDKeyBytes])
}

// ValidNodeID reports whether s has the form of a node ID: NodeIDPrefix and
// 16 lowercase hex digits.
func ValidNodeID(s string) bool {
	digits, ok := strings.CutPrefix(s, NodeIDPrefix)
	if !ok || len(digits) != 2*nodeIDKeyBytes {
		return false
	}
	for _, c := range digits {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}
