package kubernetes

import (
	"net"
	"net/netip"
	"os"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"cairn.dev/cairn/pkg/netnstest"
)

// TestSyncPodRoutes programs routes in a network namespace of its own: to
// other nodes' ranges through their addresses, none to the node's own,
// stale ones of Cairn's removed and other routes left alone.
func TestSyncPodRoutes(t *testing.T) {
	_, nl := routedNamespace(t)
	routes := func() map[string]string { return routeMap(t, nl) }
	r := func(node, rng, addr string) podRange {
		return podRange{Node: node, Range: netip.MustParsePrefix(rng), Address: netip.MustParseAddr(addr)}
	}
	ranges := []podRange{r("me", "10.192.0.0/24", "10.42.0.10"), r("b", "10.192.1.0/24", "10.42.0.11"), r("c", "10.192.2.0/24", "10.42.0.12")}
	if err := syncPodRoutes(nl, "me", ranges); err != nil {
		t.Fatal(err)
	}
	got := routes()
	if got["10.192.1.0/24"] != "10.42.0.11" || got["10.192.2.0/24"] != "10.42.0.12" || got["10.192.0.0/24"] != "" {
		t.Errorf("routes = %v, want b's and c's ranges through them, none to this node's", got)
	}
	// c leaves, b moves.
	if err := syncPodRoutes(nl, "me", []podRange{r("b", "10.192.1.0/24", "10.42.0.21")}); err != nil {
		t.Fatal(err)
	}
	got = routes()
	if got["10.192.1.0/24"] != "10.42.0.21" || got["10.192.2.0/24"] != "" || got["172.16.0.0/16"] != "10.42.0.1" {
		t.Errorf("routes = %v, want b's through its new address, c's gone, the other route kept", got)
	}
}

// routedNamespace makes a network namespace, for a test that needs root,
// where the node is 10.42.0.10/24 on eth0 and 172.16.0.0/16 is routed
// through 10.42.0.1 by a route that is not Cairn's. nl is closed when t
// ends.
func routedNamespace(t *testing.T) (netns.NsHandle, *netlink.Handle) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root for a network namespace")
	}
	ns := netnstest.New(t)
	nl, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nl.Close)
	pair := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth0"}, PeerName: "peer0"}
	if err := nl.LinkAdd(pair); err != nil {
		t.Fatal(err)
	}
	peer, _ := nl.LinkByName("peer0")
	if err := nl.LinkSetUp(peer); err != nil {
		t.Fatal(err)
	}
	link, _ := nl.LinkByName("eth0")
	addr, _ := netlink.ParseAddr("10.42.0.10/24")
	if err := nl.AddrAdd(link, addr); err != nil {
		t.Fatal(err)
	}
	if err := nl.LinkSetUp(link); err != nil {
		t.Fatal(err)
	}
	_, other, _ := net.ParseCIDR("172.16.0.0/16")
	if err := nl.RouteAdd(&netlink.Route{Dst: other, Gw: net.ParseIP("10.42.0.1")}); err != nil {
		t.Fatal(err)
	}
	return ns, nl
}

// routeMap maps the destination of each gateway route of nl to its
// gateway.
func routeMap(t *testing.T, nl *netlink.Handle) map[string]string {
	t.Helper()
	rs, err := nl.RouteList(nil, netlink.FAMILY_V4)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, r := range rs {
		if r.Dst != nil && r.Gw != nil {
			m[r.Dst.String()] = r.Gw.String()
		}
	}
	return m
}
