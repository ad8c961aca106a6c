package releasetest

import (
	"bytes"
	"crypto/ed25519"

	"cairn.dev/cairn/pkg/release"
)

// PrivateKey is the release key whose ed25519 seed is 32 bytes of seed:
// a test names as many distinct keys as it needs, with the same IDs in
// every run.
func PrivateKey(seed byte) release.PrivateKey {
	return release.PrivateKey(ed25519.NewKeyFromSeed(bytes.Repeat([]byte{seed}, ed25519.SeedSize)))
}

// PublicKey is the public half of PrivateKey(seed).
func PublicKey(seed byte) release.PublicKey {
	return PrivateKey(seed).Public()
}
