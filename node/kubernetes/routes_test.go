package kubernetes

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"cairn.dev/cairn/pkg/netnstest"
)

// TestRouteThroughTunnel programs the pod tunnel's routes in a network
// namespace of its own, with a veth in the tunnel's place: the
// pod range into it, in place of a gateway route of Cairn's that a
// version before the tunnel left; a controller's address into it for
// traffic from the pod range alone; other routes left alone. The tunnel's
// address in the pod range is where the node's traffic to the controller
// comes from, and goes when the node is no worker. Then it removes them
// all.
func TestRouteThroughTunnel(t *testing.T) {
	_, nl := routedNamespace(t)
	tun := tunnelStandIn(t, nl)
	stale := &netlink.Route{Dst: ipNet(netip.MustParsePrefix("10.192.1.0/24")), Gw: net.ParseIP("10.42.0.11"), Protocol: podRouteProtocol}
	if err := nl.RouteAdd(stale); err != nil {
		t.Fatal(err)
	}
	controller := netip.MustParseAddr("10.42.0.20")
	if err := routeThroughTunnel(nl, tun, []netip.Addr{controller}); err != nil {
		t.Fatal(err)
	}
	if err := addressTunnel(nl, netip.MustParsePrefix("10.192.0.0/24")); err != nil {
		t.Fatal(err)
	}
	check := func(when string, wantMain, wantControllers []string, wantRules int) {
		t.Helper()
		for _, tc := range []struct {
			table int
			want  []string
		}{{unix.RT_TABLE_MAIN, wantMain}, {controllerTable, wantControllers}} {
			rs, err := listPodRoutes(nl, tc.table)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, r := range rs {
				got = append(got, fmt.Sprintf("%s dev %d", r.Dst, r.LinkIndex))
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("%s: Cairn's routes in table %d = %q, want %q", when, tc.table, got, tc.want)
			}
		}
		if rules, err := controllerRules(nl); err != nil || len(rules) != wantRules {
			t.Errorf("%s: %d rules of the controller table (%v), want %d", when, len(rules), err, wantRules)
		}
		if routeMap(t, nl)["172.16.0.0/16"] != "10.42.0.1" {
			t.Errorf("%s: the route that is not Cairn's is gone", when)
		}
	}
	viaTunnel := fmt.Sprintf("dev %d", tun)
	check("routed", []string{"10.192.0.0/11 " + viaTunnel}, []string{"10.42.0.20/32 " + viaTunnel}, 1)
	// To the controller: from the tunnel's address in the pod range
	// through the tunnel, from the node's own address as before.
	for from, want := range map[string]int{"10.192.0.1": tun, "10.42.0.10": linkIndex(t, nl, "eth0")} {
		rs, err := nl.RouteGetWithOptions(controller.AsSlice(), &netlink.RouteGetOptions{SrcAddr: net.ParseIP(from)})
		if err != nil || len(rs) != 1 || rs[0].LinkIndex != want {
			t.Errorf("route to the controller from %s = %+v, %v; want through link %d", from, rs, err, want)
		}
	}
	// Kubernetes gave the node another range: the tunnel's address
	// moves, and its routes stay.
	if err := addressTunnel(nl, netip.MustParsePrefix("10.192.5.0/24")); err != nil {
		t.Fatal(err)
	}
	if addrs, err := nl.AddrList(&netlink.Device{LinkAttrs: netlink.LinkAttrs{Index: tun}}, netlink.FAMILY_V4); err != nil || len(addrs) != 1 || addrs[0].IPNet.String() != "10.192.5.1/32" {
		t.Errorf("addresses of the tunnel after the range moved: %v, %v; want 10.192.5.1/32 alone", addrs, err)
	}
	check("the range moved", []string{"10.192.0.0/11 " + viaTunnel}, []string{"10.42.0.20/32 " + viaTunnel}, 1)
	if err := routeThroughTunnel(nl, tun, nil); err != nil {
		t.Fatal(err)
	}
	check("the controller gone", []string{"10.192.0.0/11 " + viaTunnel}, nil, 1)
	// The node lost the worker role but stays a controller: its tunnel
	// keeps no address of a range.
	if err := addressTunnel(nl, netip.Prefix{}); err != nil {
		t.Fatal(err)
	}
	if addrs, err := nl.AddrList(&netlink.Device{LinkAttrs: netlink.LinkAttrs{Index: tun}}, netlink.FAMILY_V4); err != nil || len(addrs) != 0 {
		t.Errorf("addresses of the tunnel of a controller: %v, %v; want none", addrs, err)
	}
	// The kernel dropped the routes through the device with its last
	// address; routing again (as the tunnel does every 10 s) puts them
	// back.
	check("the tunnel's address removed", nil, nil, 1)
	if err := routeThroughTunnel(nl, tun, nil); err != nil {
		t.Fatal(err)
	}
	check("routed again", []string{"10.192.0.0/11 " + viaTunnel}, nil, 1)
	if n, err := removePodRoutes(nl); err != nil || n != 1 {
		t.Errorf("removePodRoutes = %d, %v; want 1 route removed", n, err)
	}
	check("removed", nil, nil, 0)
}

// tunnelStandIn makes a device named as the tunnel, up, in nl's
// namespace, and returns its index: one end of a veth pair, as kernels
// without WireGuard (or dummy devices) have those.
func tunnelStandIn(t *testing.T, nl *netlink.Handle) int {
	t.Helper()
	if err := nl.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: tunnelDevice}, PeerName: "tunnel-peer"}); err != nil {
		t.Fatal(err)
	}
	link, err := nl.LinkByName(tunnelDevice)
	if err != nil {
		t.Fatal(err)
	}
	if err := nl.LinkSetUp(link); err != nil {
		t.Fatal(err)
	}
	return link.Attrs().Index
}

// linkIndex is the index of the device name of nl's namespace.
func linkIndex(t *testing.T, nl *netlink.Handle, name string) int {
	t.Helper()
	link, err := nl.LinkByName(name)
	if err != nil {
		t.Fatal(err)
	}
	return link.Attrs().Index
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
