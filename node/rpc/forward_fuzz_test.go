package rpc

import (
	"bytes"
	"testing"

	"cairn.dev/cairn/node/identity"
)

// FuzzDecodeForwardedPeer feeds arbitrary header values to the decoder:
// it must never panic, and whatever it accepts must encode back to the
// same value and name a peer that can exist.
func FuzzDecodeForwardedPeer(f *testing.F) {
	key := bytes.Repeat([]byte{1}, 32)
	for _, p := range []identity.Peer{
		{Kind: identity.PeerAnonymous},
		{Kind: identity.PeerSelfSigned, PublicKey: key},
		{Kind: identity.PeerNode, PublicKey: key},
		{Kind: identity.PeerOwner, PublicKey: key},
	} {
		f.Add(encodeForwardedPeer(p))
	}
	f.Add("node")
	f.Add("anonymous AAAA")
	f.Add("owner !!")
	f.Fuzz(func(t *testing.T, v string) {
		p, err := decodeForwardedPeer(v)
		if err != nil {
			return
		}
		if got := encodeForwardedPeer(p); got != v {
			t.Errorf("encodeForwardedPeer(decodeForwardedPeer(%q)) = %q", v, got)
		}
		if p.Kind != identity.PeerAnonymous && len(p.PublicKey) != 32 {
			t.Errorf("decodeForwardedPeer(%q) has a %d-byte key", v, len(p.PublicKey))
		}
		if p.Kind == identity.PeerNode && p.NodeID != identity.NodeID(p.PublicKey) {
			t.Errorf("decodeForwardedPeer(%q) names node %q, not the key's", v, p.NodeID)
		}
	})
}
