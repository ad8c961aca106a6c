package netns

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv4/server4"
)

// leases is what the DHCP server knows: a fixed address for each MAC
// address, and the options every lease carries. It is read-only once made.
type leases struct {
	byMAC     map[string]netip.Addr
	nodeOf    map[string]int
	server    netip.Addr
	mask      net.IPMask
	leaseTime time.Duration
	dns       []net.IP
}

func newLeases(nodes []Node, leaseTime time.Duration, dns []netip.Addr) *leases {
	l := &leases{
		byMAC:     make(map[string]netip.Addr, len(nodes)),
		nodeOf:    make(map[string]int, len(nodes)),
		server:    BridgeAddr,
		mask:      net.CIDRMask(Prefix.Bits(), 32),
		leaseTime: leaseTime,
	}
	for i, n := range nodes {
		l.byMAC[n.MAC.String()] = n.IP
		l.nodeOf[n.MAC.String()] = i
	}
	for _, a := range dns {
		l.dns = append(l.dns, a.AsSlice())
	}
	return l
}

// errNoReply marks requests the server stays silent on.
var errNoReply = errors.New("no reply")

// reply answers one client message: an OFFER for a DISCOVER, an ACK or a
// NAK for a REQUEST. Every other message, and any message from a MAC
// address without a lease, gets no reply (errNoReply, wrapped with why).
func (l *leases) reply(req *dhcpv4.DHCPv4) (*dhcpv4.DHCPv4, error) {
	if req.OpCode != dhcpv4.OpcodeBootRequest {
		return nil, fmt.Errorf("%w: opcode %v", errNoReply, req.OpCode)
	}
	ip, ok := l.byMAC[req.ClientHWAddr.String()]
	if !ok {
		return nil, fmt.Errorf("%w: no lease for MAC %s", errNoReply, req.ClientHWAddr)
	}
	switch mt := req.MessageType(); mt {
	case dhcpv4.MessageTypeDiscover:
		return l.lease(req, dhcpv4.MessageTypeOffer, ip)
	case dhcpv4.MessageTypeRequest:
		if sid := req.ServerIdentifier(); sid != nil && !sid.Equal(l.server.AsSlice()) {
			// The client chose another server's offer.
			return nil, fmt.Errorf("%w: request for server %s", errNoReply, sid)
		}
		if want := requestedIP(req); want != nil && !want.Equal(ip.AsSlice()) {
			return l.nak(req, fmt.Sprintf("address %s is not leased to %s", want, req.ClientHWAddr))
		}
		return l.lease(req, dhcpv4.MessageTypeAck, ip)
	default:
		return nil, fmt.Errorf("%w: message type %v", errNoReply, mt)
	}
}

// requestedIP is the address a REQUEST asks for: the requested-address
// option while selecting or rebooting, the client address while renewing
// or rebinding.
func requestedIP(req *dhcpv4.DHCPv4) net.IP {
	if ip := req.RequestedIPAddress(); ip != nil && !ip.IsUnspecified() {
		return ip
	}
	if ip := req.ClientIPAddr; ip != nil && !ip.IsUnspecified() {
		return ip
	}
	return nil
}

func (l *leases) lease(req *dhcpv4.DHCPv4, mt dhcpv4.MessageType, ip netip.Addr) (*dhcpv4.DHCPv4, error) {
	server := net.IP(l.server.AsSlice())
	mods := []dhcpv4.Modifier{
		dhcpv4.WithMessageType(mt),
		dhcpv4.WithYourIP(ip.AsSlice()),
		dhcpv4.WithServerIP(server),
		dhcpv4.WithOption(dhcpv4.OptServerIdentifier(server)),
		dhcpv4.WithNetmask(l.mask),
		dhcpv4.WithRouter(server),
		// The harness serves SNTP where it serves DHCP (sntp.go).
		dhcpv4.WithOption(dhcpv4.OptNTPServers(server)),
		dhcpv4.WithOption(dhcpv4.OptIPAddressLeaseTime(l.leaseTime)),
		dhcpv4.WithOption(dhcpv4.OptRenewTimeValue(l.leaseTime / 2)),
		dhcpv4.WithOption(dhcpv4.OptRebindingTimeValue(l.leaseTime * 7 / 8)),
	}
	if len(l.dns) > 0 {
		mods = append(mods, dhcpv4.WithDNS(l.dns...))
	}
	resp, err := dhcpv4.NewReplyFromRequest(req, mods...)
	if err != nil {
		return nil, fmt.Errorf("when building %v: %w", mt, err)
	}
	return resp, nil
}

func (l *leases) nak(req *dhcpv4.DHCPv4, why string) (*dhcpv4.DHCPv4, error) {
	server := net.IP(l.server.AsSlice())
	resp, err := dhcpv4.NewReplyFromRequest(req,
		dhcpv4.WithMessageType(dhcpv4.MessageTypeNak),
		dhcpv4.WithOption(dhcpv4.OptServerIdentifier(server)),
		dhcpv4.WithOption(dhcpv4.OptMessage(why)),
	)
	if err != nil {
		return nil, fmt.Errorf("when building NAK: %w", err)
	}
	return resp, nil
}

// dhcpServer serves leases on the bridge. Its goroutine runs the server's
// loop until close closes the socket; the library handles each message on
// a goroutine of its own, which ends after one write.
type dhcpServer struct {
	srv  *server4.Server
	done chan error
	once sync.Once
	err  error
}

// startDHCP opens the server's socket inside the namespace, bound to the
// bridge, and starts serving.
func (n *Network) startDHCP(cfg Config) (*dhcpServer, error) {
	l := newLeases(n.nodes, n.leaseTime, cfg.DNS)
	var conn net.PacketConn
	err := n.Do(func() error {
		var err error
		conn, err = server4.NewIPv4UDPConn(BridgeName, &net.UDPAddr{Port: dhcpv4.ServerPort})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("when opening DHCP socket: %w", err)
	}
	handler := func(conn net.PacketConn, peer net.Addr, req *dhcpv4.DHCPv4) {
		resp, err := l.reply(req)
		if err != nil {
			n.log("dhcp: %s from %s: %v", req.MessageType(), req.ClientHWAddr, err)
			return
		}
		// An ACK is recorded before it leaves: each message is handled on a
		// goroutine of its own, and a client that answers at once could
		// otherwise have its next ACK recorded first.
		if resp.MessageType() == dhcpv4.MessageTypeAck {
			ip, _ := netip.AddrFromSlice(resp.YourIPAddr.To4())
			n.acks.add(l.nodeOf[req.ClientHWAddr.String()], Ack{
				Time:    time.Now(),
				IP:      ip,
				Renewal: !req.ClientIPAddr.IsUnspecified(),
			})
		}
		if _, err := conn.WriteTo(resp.ToBytes(), peer); err != nil {
			n.log("dhcp: when sending %s to %s: %v", resp.MessageType(), peer, err)
			return
		}
		n.log("dhcp: %s from %s, %s %s", req.MessageType(), req.ClientHWAddr, resp.MessageType(), resp.YourIPAddr)
	}
	srv, err := server4.NewServer(BridgeName, nil, handler, server4.WithConn(conn))
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("when making DHCP server: %w", err)
	}
	s := &dhcpServer{srv: srv, done: make(chan error, 1)}
	go func() { s.done <- srv.Serve() }()
	return s, nil
}

// close stops the server and waits for its loop to end.
func (s *dhcpServer) close() error {
	s.once.Do(func() {
		s.srv.Close()
		err := <-s.done
		if err != nil && !errors.Is(err, net.ErrClosed) {
			s.err = fmt.Errorf("dhcp server: %w", err)
		}
	})
	return s.err
}
