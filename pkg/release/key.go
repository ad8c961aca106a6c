package release

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"
)

// publicKeyPrefix starts the text form of a release public key, which
// names the algorithm so that another can follow.
const publicKeyPrefix = "cairn-release-ed25519:"

// A PublicKey is a release key's public half, which nodes trust.
type PublicKey ed25519.PublicKey

// ParsePublicKey reads a public key's text form,
// cairn-release-ed25519:<standard base64 of the 32-byte key>, as cluster
// configuration and make variables carry it.
func ParsePublicKey(s string) (PublicKey, error) {
	b64, ok := strings.CutPrefix(strings.TrimSpace(s), publicKeyPrefix)
	if !ok {
		return nil, fmt.Errorf("release key %q does not start with %q", s, publicKeyPrefix)
	}
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return nil, fmt.Errorf("when decoding release key %q: %w", s, err)
	}
	if len(raw) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("release key %q has %d bytes, want %d", s, len(raw), ed25519.PublicKeySize)
	}
	return PublicKey(raw), nil
}

// String returns the text form ParsePublicKey reads.
func (k PublicKey) String() string {
	return publicKeyPrefix + base64.StdEncoding.EncodeToString(k)
}

// ID names the key in signatures and errors: the first 8 bytes of the
// SHA-256 of the key, in hex.
func (k PublicKey) ID() string {
	sum := sha256.Sum256(k)
	return hex.EncodeToString(sum[:8])
}

// A PrivateKey is a release key, which signs releases.
type PrivateKey ed25519.PrivateKey

// GenerateKey makes a new release key.
func GenerateKey() (PrivateKey, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("when generating a release key: %w", err)
	}
	return PrivateKey(priv), nil
}

// Public returns the key's public half.
func (k PrivateKey) Public() PublicKey {
	return PublicKey(ed25519.PrivateKey(k).Public().(ed25519.PublicKey))
}

// MarshalPrivateKey encodes k as a PEM "PRIVATE KEY" (PKCS #8), the form
// other tools read too.
func MarshalPrivateKey(k PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(ed25519.PrivateKey(k))
	if err != nil {
		return nil, fmt.Errorf("when encoding the release key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// ParsePrivateKey reads what MarshalPrivateKey wrote.
func ParsePrivateKey(data []byte) (PrivateKey, error) {
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "PRIVATE KEY" {
		return nil, errors.New("the release key is not a PEM PRIVATE KEY")
	}
	key, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("when decoding the release key: %w", err)
	}
	priv, ok := key.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("the release key is a %T, want ed25519", key)
	}
	return PrivateKey(priv), nil
}
