package network

import (
	"net"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/vishvananda/netlink"
)

// TestTakeLinksDown: in a namespace with loopback and a veth link up, and
// another veth pair left down, the link that was up goes down, loopback
// stays up, and the links already down are left alone.
func TestTakeLinksDown(t *testing.T) {
	n := newTestNet(t)
	n.setPeerUp(t)
	lo, err := n.serverNL.LinkByName("lo")
	if err != nil {
		t.Fatalf("LinkByName(lo): %v", err)
	}
	if err := n.serverNL.LinkSetUp(lo); err != nil {
		t.Fatalf("LinkSetUp(lo): %v", err)
	}
	if err := n.serverNL.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "idle0"}, PeerName: "idle1"}); err != nil {
		t.Fatalf("LinkAdd(veth): %v", err)
	}

	down, err := takeLinksDown(n.serverNL)
	if err != nil {
		t.Fatalf("takeLinksDown: %v", err)
	}
	if diff := cmp.Diff([]string{"peer0"}, down); diff != "" {
		t.Errorf("links taken down (-want +got):\n%s", diff)
	}
	for name, up := range map[string]bool{"lo": true, "peer0": false, "idle0": false, "idle1": false} {
		l, err := n.serverNL.LinkByName(name)
		if err != nil {
			t.Fatalf("LinkByName(%s): %v", name, err)
		}
		if got := l.Attrs().Flags&net.FlagUp != 0; got != up {
			t.Errorf("link %s up: %v, want %v", name, got, up)
		}
	}
	if down, err := takeLinksDown(n.serverNL); err != nil || len(down) != 0 {
		t.Errorf("takeLinksDown again = %q, %v; want nothing to do", down, err)
	}
}
