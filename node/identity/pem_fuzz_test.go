package identity_test

import (
	"bytes"
	"testing"

	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/node/identity/identitytest"
)

// FuzzParseNodePEM feeds arbitrary bytes to the bundle parser, which reads
// files from the node's disk. It must never panic, and whatever it accepts
// must survive a round trip unchanged.
func FuzzParseNodePEM(f *testing.F) {
	n := identitytest.NewCA(f, "cluster CA").Node(f)
	bundle, err := n.MarshalPEM()
	if err != nil {
		f.Fatalf("MarshalPEM: %v", err)
	}
	f.Add(bundle)
	f.Add(bundle[:len(bundle)/2])
	f.Add(bytes.ReplaceAll(bundle, []byte("CERTIFICATE"), []byte("PRIVATE KEY")))
	f.Add([]byte("-----BEGIN PRIVATE KEY-----\n-----END PRIVATE KEY-----\n"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		n, err := identity.ParseNodePEM(data)
		if err != nil {
			return
		}
		again, err := n.MarshalPEM()
		if err != nil {
			t.Fatalf("MarshalPEM of an accepted bundle: %v", err)
		}
		m, err := identity.ParseNodePEM(again)
		if err != nil {
			t.Fatalf("ParseNodePEM(MarshalPEM()) = %v for an accepted bundle", err)
		}
		if m.ID() != n.ID() {
			t.Fatalf("round trip changed ID from %q to %q", n.ID(), m.ID())
		}
		if third, _ := m.MarshalPEM(); !bytes.Equal(third, again) {
			t.Fatalf("MarshalPEM is not stable across a round trip")
		}
	})
}
