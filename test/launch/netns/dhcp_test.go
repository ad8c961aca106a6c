package netns

import (
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/insomniacslk/dhcp/dhcpv4"
)

// leaseView is the part of a reply that a node acts on.
type leaseView struct {
	Type      string
	YourIP    string
	Mask      string
	Router    []string
	Server    string
	DNS       []string
	NTP       []string
	LeaseTime time.Duration
	Renew     time.Duration
}

func viewOf(m *dhcpv4.DHCPv4) leaseView {
	v := leaseView{
		Type:      m.MessageType().String(),
		YourIP:    m.YourIPAddr.String(),
		Server:    m.ServerIdentifier().String(),
		LeaseTime: m.IPAddressLeaseTime(0),
		Renew:     m.IPAddressRenewalTime(0),
	}
	if mask := m.SubnetMask(); mask != nil {
		v.Mask = net.IP(mask).String()
	}
	for _, r := range m.Router() {
		v.Router = append(v.Router, r.String())
	}
	for _, d := range m.DNS() {
		v.DNS = append(v.DNS, d.String())
	}
	for _, a := range m.NTPServers() {
		v.NTP = append(v.NTP, a.String())
	}
	return v
}

func request(t *testing.T, mac net.HardwareAddr, mods ...dhcpv4.Modifier) *dhcpv4.DHCPv4 {
	t.Helper()
	m, err := dhcpv4.New(append([]dhcpv4.Modifier{dhcpv4.WithHwAddr(mac)}, mods...)...)
	if err != nil {
		t.Fatalf("dhcpv4.New: %v", err)
	}
	return m
}

func TestReply(t *testing.T) {
	nodes := nodesFor(2)
	l := newLeases(nodes, time.Minute, nil)
	withDNS := newLeases(nodes, time.Minute, []netip.Addr{BridgeAddr})
	stranger := net.HardwareAddr{0x52, 0x54, 0x00, 0x99, 0x99, 0x99}
	ack := func(ip string) leaseView {
		return leaseView{
			Type: "ACK", YourIP: ip, Mask: "255.255.255.0",
			Router: []string{"10.42.0.1"}, Server: "10.42.0.1", NTP: []string{"10.42.0.1"},
			LeaseTime: time.Minute, Renew: 30 * time.Second,
		}
	}
	offer := ack("10.42.0.11")
	offer.Type = "OFFER"
	ackDNS := ack("10.42.0.10")
	ackDNS.DNS = []string{"10.42.0.1"}
	nak := leaseView{Type: "NAK", YourIP: "0.0.0.0", Server: "10.42.0.1"}

	for _, tc := range []struct {
		name   string
		leases *leases
		req    *dhcpv4.DHCPv4
		want   *leaseView // nil: no reply
	}{
		{"discover", l, request(t, nodes[1].MAC,
			dhcpv4.WithMessageType(dhcpv4.MessageTypeDiscover)), &offer},
		{"select", l, request(t, nodes[0].MAC,
			dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest),
			dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(net.IPv4(10, 42, 0, 10))),
			dhcpv4.WithOption(dhcpv4.OptServerIdentifier(net.IPv4(10, 42, 0, 1)))), ptr(ack("10.42.0.10"))},
		{"renew", l, request(t, nodes[1].MAC,
			dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest),
			dhcpv4.WithClientIP(net.IPv4(10, 42, 0, 11))), ptr(ack("10.42.0.11"))},
		{"dns", withDNS, request(t, nodes[0].MAC,
			dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest)), &ackDNS},
		{"other address", l, request(t, nodes[0].MAC,
			dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest),
			dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(net.IPv4(10, 42, 0, 11)))), &nak},
		{"other server", l, request(t, nodes[0].MAC,
			dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest),
			dhcpv4.WithOption(dhcpv4.OptServerIdentifier(net.IPv4(10, 42, 0, 2)))), nil},
		{"unknown MAC", l, request(t, stranger,
			dhcpv4.WithMessageType(dhcpv4.MessageTypeDiscover)), nil},
		{"release", l, request(t, nodes[0].MAC,
			dhcpv4.WithMessageType(dhcpv4.MessageTypeRelease)), nil},
		{"reply opcode", l, request(t, nodes[0].MAC,
			dhcpv4.WithMessageType(dhcpv4.MessageTypeDiscover),
			func(m *dhcpv4.DHCPv4) { m.OpCode = dhcpv4.OpcodeBootReply }), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := tc.leases.reply(tc.req)
			if tc.want == nil {
				if !errors.Is(err, errNoReply) {
					t.Fatalf("reply(%s) = %v, %v; want no reply", tc.req.Summary(), resp, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("reply(%s): %v", tc.req.Summary(), err)
			}
			if resp.TransactionID != tc.req.TransactionID {
				t.Errorf("reply transaction ID = %v, want %v", resp.TransactionID, tc.req.TransactionID)
			}
			if diff := cmp.Diff(*tc.want, viewOf(resp)); diff != "" {
				t.Errorf("reply(%s) (-want +got):\n%s", tc.name, diff)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

func TestNodesFor(t *testing.T) {
	nodes := nodesFor(MaxNodes)
	seen := map[string]bool{}
	for i, n := range nodes {
		if !Prefix.Contains(n.IP) || n.IP == BridgeAddr {
			t.Errorf("node %d IP %s: not a node address of %s", i, n.IP, Prefix)
		}
		for _, k := range []string{n.Tap, n.MAC.String(), n.IP.String()} {
			if seen[k] {
				t.Errorf("node %d: %q used twice", i, k)
			}
			seen[k] = true
		}
	}
	if got, want := nodes[1].MAC.String(), "52:54:00:42:00:0b"; got != want {
		t.Errorf("nodesFor(2)[1].MAC = %q, want %q", got, want)
	}
	if got, want := nodes[1].IP.String(), "10.42.0.11"; got != want {
		t.Errorf("nodesFor(2)[1].IP = %q, want %q", got, want)
	}
	want := []string{
		"-netdev", "tap,id=net0,ifname=tap1,script=no,downscript=no",
		"-device", "virtio-net-pci,netdev=net0,mac=52:54:00:42:00:0b",
	}
	if diff := cmp.Diff(want, nodes[1].QEMUArgs()); diff != "" {
		t.Errorf("QEMUArgs (-want +got):\n%s", diff)
	}
}

func TestNewRejectsConfig(t *testing.T) {
	for _, cfg := range []Config{
		{Nodes: -1},
		{Nodes: MaxNodes + 1},
		{Nodes: 1, LeaseTime: -time.Second},
	} {
		if n, err := New(cfg); err == nil {
			n.Close()
			t.Errorf("New(%+v) succeeded, want an error", cfg)
		}
	}
}

// FuzzReply feeds the lease logic whatever a client on the network could
// send: it must answer or stay silent, never panic.
func FuzzReply(f *testing.F) {
	nodes := nodesFor(2)
	l := newLeases(nodes, time.Minute, []netip.Addr{BridgeAddr})
	for _, mt := range []dhcpv4.MessageType{dhcpv4.MessageTypeDiscover, dhcpv4.MessageTypeRequest} {
		m, err := dhcpv4.New(dhcpv4.WithHwAddr(nodes[0].MAC), dhcpv4.WithMessageType(mt))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(m.ToBytes())
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := dhcpv4.FromBytes(b)
		if err != nil {
			return
		}
		resp, err := l.reply(m)
		if err == nil && resp == nil {
			t.Fatalf("reply(%s) = nil, nil", m.Summary())
		}
		if err == nil {
			resp.ToBytes()
		}
	})
}
