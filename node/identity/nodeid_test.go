package identity_test

import (
	"crypto/ed25519"
	"encoding/hex"
	"testing"

	"cairn.dev/cairn/node/identity"
)

func TestNodeID(t *testing.T) {
	// The key of RFC 8032, section 7.1, test 1.
	seed, _ := hex.DecodeString("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
	key := ed25519.NewKeyFromSeed(seed)
	if got, want := hex.EncodeToString(pub(key)), "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a"; got != want {
		t.Fatalf("public key of RFC 8032 test 1 = %q, want %q", got, want)
	}
	for _, tc := range []struct {
		pub  ed25519.PublicKey
		want string
	}{
		{pub(key), "cairn-d75a980182b10ab7"},
		{make(ed25519.PublicKey, 32), "cairn-0000000000000000"},
		{nil, ""},
		{pub(key)[:8], ""},
		{append(pub(key), 0), ""},
	} {
		if got := identity.NodeID(tc.pub); got != tc.want {
			t.Errorf("NodeID(%x) = %q, want %q", []byte(tc.pub), got, tc.want)
		}
	}
}

func TestValidNodeID(t *testing.T) {
	for _, tc := range []struct {
		id   string
		want bool
	}{
		{"cairn-d75a980182b10ab7", true},
		{"cairn-0000000000000000", true},
		{"cairn-D75A980182B10AB7", false},
		{"cairn-d75a980182b10ab", false},
		{"cairn-d75a980182b10ab70", false},
		{"cairn-d75a980182b10abg", false},
		{"node-d75a980182b10ab7", false},
		{"d75a980182b10ab7", false},
		{"", false},
		{"owner", false},
	} {
		if got := identity.ValidNodeID(tc.id); got != tc.want {
			t.Errorf("ValidNodeID(%q) = %v, want %v", tc.id, got, tc.want)
		}
	}
	key := mustKey(t)
	if id := identity.NodeID(pub(key)); !identity.ValidNodeID(id) {
		t.Errorf("ValidNodeID(NodeID(random key)) = false for %q", id)
	}
}
