package network

import (
	"net"
	"sync"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv4/server4"
	"github.com/vishvananda/netns"
)

// serverMode says how the test server treats requests to extend a lease
// (those with the client's address in ciaddr).
type serverMode int

const (
	answerExtensions serverMode = iota
	ignoreExtensions
	nakExtensions
)

// testServer is a small DHCP server for tests: it hands out 10.77.0.10,
// .11 and so on, one address per client hardware address, with short
// lease times, and counts what it sees.
type testServer struct {
	lease, t1, t2 time.Duration

	mu       sync.Mutex
	mode     serverMode
	next     byte
	assigned map[string]net.IP
	// renewals counts extension requests sent by unicast from the
	// client's address, rebinds those broadcast.
	renewals, rebinds int
}

var (
	testDNS = net.IPv4(10, 77, 0, 53)
	testNTP = net.IPv4(10, 77, 0, 123)
)

// startTestServer runs a testServer on peer0 in ns until the test ends.
func startTestServer(t *testing.T, ns netns.NsHandle, lease, t1, t2 time.Duration) *testServer {
	t.Helper()
	ts := &testServer{lease: lease, t1: t1, t2: t2, next: 10, assigned: make(map[string]net.IP)}
	var srv *server4.Server
	err := inNamespace(ns, func() error {
		var err error
		srv, err = server4.NewServer("peer0", nil, ts.handle)
		return err
	})
	if err != nil {
		t.Fatalf("starting DHCP server: %v", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve()
	}()
	t.Cleanup(func() {
		srv.Close()
		<-done
	})
	return ts
}

func (ts *testServer) setMode(m serverMode) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	ts.mode = m
}

func (ts *testServer) counts() (renewals, rebinds int) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.renewals, ts.rebinds
}

// addrFor returns the address of the client hw, assigning the next free
// one if it has none.
func (ts *testServer) addrFor(hw net.HardwareAddr) net.IP {
	ip, ok := ts.assigned[hw.String()]
	if !ok {
		ip = net.IPv4(10, 77, 0, ts.next).To4()
		ts.next++
		ts.assigned[hw.String()] = ip
	}
	return ip
}

func (ts *testServer) handle(conn net.PacketConn, peer net.Addr, m *dhcpv4.DHCPv4) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	var reply dhcpv4.MessageType
	switch m.MessageType() {
	case dhcpv4.MessageTypeDiscover:
		reply = dhcpv4.MessageTypeOffer
	case dhcpv4.MessageTypeRequest:
		reply = ts.answerRequest(peer, m)
	default:
		return
	}
	if reply == dhcpv4.MessageTypeNone {
		return
	}
	resp, err := dhcpv4.NewReplyFromRequest(m,
		dhcpv4.WithMessageType(reply),
		dhcpv4.WithServerIP(serverPrefix.Addr().AsSlice()),
		dhcpv4.WithOption(dhcpv4.OptServerIdentifier(serverPrefix.Addr().AsSlice())),
	)
	if err != nil {
		return
	}
	if reply != dhcpv4.MessageTypeNak {
		resp.YourIPAddr = ts.addrFor(m.ClientHWAddr)
		resp.UpdateOption(dhcpv4.OptSubnetMask(net.CIDRMask(24, 32)))
		resp.UpdateOption(dhcpv4.OptRouter(serverPrefix.Addr().AsSlice()))
		resp.UpdateOption(dhcpv4.OptDNS(testDNS))
		resp.UpdateOption(dhcpv4.OptNTPServers(testNTP))
		resp.UpdateOption(dhcpv4.OptIPAddressLeaseTime(ts.lease))
		resp.UpdateOption(dhcpv4.OptRenewTimeValue(ts.t1))
		resp.UpdateOption(dhcpv4.OptRebindingTimeValue(ts.t2))
	}
	conn.WriteTo(resp.ToBytes(), peer)
}

// answerRequest decides how to answer a REQUEST: an ACK, a NAK or, with
// MessageTypeNone, not at all.
func (ts *testServer) answerRequest(peer net.Addr, m *dhcpv4.DHCPv4) dhcpv4.MessageType {
	want := m.RequestedIPAddress()
	if !m.ClientIPAddr.IsUnspecified() {
		want = m.ClientIPAddr
		if udp, ok := peer.(*net.UDPAddr); ok && udp.IP.Equal(m.ClientIPAddr) {
			ts.renewals++
		} else {
			ts.rebinds++
		}
		switch ts.mode {
		case ignoreExtensions:
			return dhcpv4.MessageTypeNone
		case nakExtensions:
			// The client's address is taken back: it gets another one.
			delete(ts.assigned, m.ClientHWAddr.String())
			return dhcpv4.MessageTypeNak
		}
	}
	if !want.Equal(ts.addrFor(m.ClientHWAddr)) {
		return dhcpv4.MessageTypeNak
	}
	return dhcpv4.MessageTypeAck
}
