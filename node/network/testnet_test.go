package network

import (
	"context"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"cairn.dev/cairn/pkg/event"
	"cairn.dev/cairn/pkg/event/memory"
	"cairn.dev/cairn/pkg/netnstest"
	"cairn.dev/cairn/pkg/supervisor/supervisortest"
)

// testNet is a pair of network namespaces joined by a veth pair: the
// service under test runs in client, a DHCP server (when the test wants
// one) in server.
type testNet struct {
	client, server     netns.NsHandle
	clientNL, serverNL *netlink.Handle
	// clientLink is "eth0" in client, peerLink "peer0" in server.
	clientLink, peerLink netlink.Link
}

var (
	clientMAC    = net.HardwareAddr{0x02, 0x00, 0x00, 0x00, 0x00, 0x01}
	serverPrefix = netip.MustParsePrefix("10.77.0.1/24")
)

// newTestNet builds a testNet. Its namespaces and links go away when the
// test ends, failed or not: closing the last handle of a namespace
// destroys it with its links.
func newTestNet(t *testing.T) *testNet {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces")
	}
	n := &testNet{client: netnstest.New(t), server: netnstest.New(t)}
	n.clientNL = newHandle(t, n.client)
	n.serverNL = newHandle(t, n.server)
	veth := &netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: "eth0", HardwareAddr: clientMAC},
		PeerName:      "peer0",
		PeerNamespace: netlink.NsFd(int(n.server)),
	}
	if err := n.clientNL.LinkAdd(veth); err != nil {
		t.Fatalf("LinkAdd(veth): %v", err)
	}
	t.Cleanup(func() {
		if l, err := n.clientNL.LinkByName("eth0"); err == nil {
			n.clientNL.LinkDel(l)
		}
	})
	var err error
	if n.clientLink, err = n.clientNL.LinkByName("eth0"); err != nil {
		t.Fatalf("LinkByName(eth0): %v", err)
	}
	if n.peerLink, err = n.serverNL.LinkByName("peer0"); err != nil {
		t.Fatalf("LinkByName(peer0): %v", err)
	}
	if err := n.serverNL.AddrAdd(n.peerLink, &netlink.Addr{IPNet: ipNet(serverPrefix)}); err != nil {
		t.Fatalf("AddrAdd(peer0): %v", err)
	}
	return n
}

func newHandle(t *testing.T, ns netns.NsHandle) *netlink.Handle {
	t.Helper()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatalf("NewHandleAt: %v", err)
	}
	t.Cleanup(h.Close)
	return h
}

// setPeerUp sets the server's end up, which gives the client carrier.
func (n *testNet) setPeerUp(t *testing.T) {
	t.Helper()
	if err := n.serverNL.LinkSetUp(n.peerLink); err != nil {
		t.Fatalf("LinkSetUp(peer0): %v", err)
	}
}

// clientAddrs returns the IPv4 addresses of the client's eth0.
func (n *testNet) clientAddrs(t *testing.T) []netlink.Addr {
	t.Helper()
	addrs, err := n.clientNL.AddrList(n.clientLink, netlink.FAMILY_V4)
	if err != nil {
		t.Fatalf("AddrList: %v", err)
	}
	return addrs
}

// clientAddr returns the address p on eth0, if it is there.
func (n *testNet) clientAddr(t *testing.T, p netip.Prefix) (netlink.Addr, bool) {
	t.Helper()
	for _, a := range n.clientAddrs(t) {
		if a.IPNet.String() == p.String() {
			return a, true
		}
	}
	return netlink.Addr{}, false
}

// defaultGateways returns the gateways of the client's default routes.
func (n *testNet) defaultGateways(t *testing.T) []string {
	t.Helper()
	routes, err := n.clientNL.RouteList(nil, netlink.FAMILY_V4)
	if err != nil {
		t.Fatalf("RouteList: %v", err)
	}
	var gws []string
	for _, r := range routes {
		if (r.Dst == nil || r.Dst.String() == "0.0.0.0/0") && r.Gw != nil {
			gws = append(gws, r.Gw.String())
		}
	}
	slices.Sort(gws)
	return gws
}

// runService runs the service in the client namespace under a test
// supervisor, writing its files into a temporary directory.
type runningService struct {
	dir     string
	address *memory.Value[netip.Prefix]
	ntp     *memory.Value[[]netip.Addr]
}

func (n *testNet) runService(t *testing.T, c Config) *runningService {
	t.Helper()
	rs := &runningService{dir: t.TempDir(), address: &memory.Value[netip.Prefix]{}, ntp: &memory.Value[[]netip.Addr]{}}
	c.Namespace = n.client
	c.ExternalAddress = rs.address
	c.NTPServers = rs.ntp
	c.ResolvConfPath = filepath.Join(rs.dir, "resolv.conf")
	c.HostnamePath = filepath.Join(rs.dir, "hostname")
	supervisortest.Harness(t, New(c).Run)
	return rs
}

// waitAddress waits until the published address satisfies pred and
// returns it.
func (rs *runningService) waitAddress(t *testing.T, timeout time.Duration, what string, pred func(netip.Prefix) bool) netip.Prefix {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	p, err := event.Get(ctx, rs.address, event.Filter(pred))
	if err != nil {
		t.Fatalf("waiting for published address to be %s: %v", what, err)
	}
	return p
}

// ntpServers returns the NTP servers the service publishes now.
func (rs *runningService) ntpServers(t *testing.T) []netip.Addr {
	t.Helper()
	servers, err := event.Get(t.Context(), rs.ntp, event.BacklogOnly[[]netip.Addr]())
	if err != nil {
		t.Fatalf("reading the published NTP servers: %v", err)
	}
	return servers
}

func (rs *runningService) readFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(rs.dir, name))
	if err != nil {
		t.Fatalf("ReadFile(%s): %v", name, err)
	}
	return string(b)
}
