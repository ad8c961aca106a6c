package release

import (
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"strings"
)

// signatureDomain starts every signed message, so that nothing else the
// release key might sign can pass for a release's signature.
const signatureDomain = "cairn release signature v1\x00"

// signedMessage is what the release key signs for the manifest digest
// ("sha256:<hex>").
func signedMessage(manifestDigest string) []byte {
	return []byte(signatureDomain + manifestDigest)
}

// A Signature is the blob of a signature manifest.
type Signature struct {
	// KeyID is PublicKey.ID of the key that signed.
	KeyID string `json:"keyID"`
	// Signature is ed25519 over the domain and the manifest digest; JSON
	// encodes it in base64.
	Signature []byte `json:"signature"`
}

// Sign signs the release manifest of manifestDigest.
func Sign(key PrivateKey, manifestDigest string) Signature {
	return Signature{
		KeyID:     key.Public().ID(),
		Signature: ed25519.Sign(ed25519.PrivateKey(key), signedMessage(manifestDigest)),
	}
}

// DecodeSignature reads a signature blob and checks its shape.
func DecodeSignature(data []byte) (Signature, error) {
	var s Signature
	if err := json.Unmarshal(data, &s); err != nil {
		return Signature{}, fmt.Errorf("%w: when decoding a release signature: %w", ErrMalformed, err)
	}
	if len(s.KeyID) != 16 || !isHex(s.KeyID) {
		return Signature{}, fmt.Errorf("%w: release signature names key %q, want 16 lowercase hex digits", ErrMalformed, s.KeyID)
	}
	if len(s.Signature) != ed25519.SignatureSize {
		return Signature{}, fmt.Errorf("%w: release signature of %d bytes, want %d", ErrMalformed, len(s.Signature), ed25519.SignatureSize)
	}
	return s, nil
}

// verifySignatures checks that one of sigs is a signature of
// manifestDigest by one of keys. Its error names the keys that signed when
// none is trusted.
func verifySignatures(manifestDigest string, sigs []Signature, keys []PublicKey) error {
	if len(sigs) == 0 {
		return fmt.Errorf("%w: release %s has no signature", ErrUnsigned, manifestDigest)
	}
	var unknown []string
	var bad error
	for _, s := range sigs {
		k, ok := findKey(keys, s.KeyID)
		switch {
		case !ok:
			unknown = append(unknown, s.KeyID)
		case ed25519.Verify(ed25519.PublicKey(k), signedMessage(manifestDigest), s.Signature):
			return nil
		default:
			bad = fmt.Errorf("%w: release %s: the signature of key %s does not verify", ErrBadSignature, manifestDigest, s.KeyID)
		}
	}
	if bad != nil {
		return bad
	}
	trusted := make([]string, len(keys))
	for i, k := range keys {
		trusted[i] = k.ID()
	}
	return fmt.Errorf("%w: release %s is signed by key %s, not by a key this node trusts (%s)",
		ErrUnknownKey, manifestDigest, strings.Join(unknown, ", "), strings.Join(trusted, ", "))
}

func findKey(keys []PublicKey, id string) (PublicKey, bool) {
	for _, k := range keys {
		if k.ID() == id {
			return k, true
		}
	}
	return nil, false
}
