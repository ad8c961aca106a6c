package network

import (
	"testing"

	"github.com/vishvananda/netlink"
)

func TestIsEthernet(t *testing.T) {
	for _, tc := range []struct {
		link netlink.Link
		want bool
	}{
		{&netlink.Device{LinkAttrs: netlink.LinkAttrs{Name: "eth0", EncapType: "ether"}}, true},
		{&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth0", EncapType: "ether"}}, true},
		// The host end of a pod's veth pair, as the CNI plugin names it.
		{&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "veth0b062ae8", EncapType: "ether"}}, false},
		{&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "br0", EncapType: "ether"}}, false},
		{&netlink.Device{LinkAttrs: netlink.LinkAttrs{Name: "lo", EncapType: "loopback"}}, false},
	} {
		if got := isEthernet(tc.link); got != tc.want {
			t.Errorf("isEthernet(%s %s) = %t, want %t", tc.link.Type(), tc.link.Attrs().Name, got, tc.want)
		}
	}
}
