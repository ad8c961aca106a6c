package releasetest

import (
	"bytes"
	"testing"

	"cairn.dev/cairn/pkg/release"
)

func TestKeys(t *testing.T) {
	a, b := PublicKey(1), PublicKey(2)
	if bytes.Equal(a, b) || !bytes.Equal(a, PublicKey(1)) {
		t.Fatalf("PublicKey(1) = %s, PublicKey(2) = %s: want distinct keys, the same for a seed", a.ID(), b.ID())
	}
	if _, err := release.ParsePublicKey(a.String()); err != nil {
		t.Fatalf("ParsePublicKey(%q): %v", a, err)
	}
}
