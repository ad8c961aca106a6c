package netns

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"

	"cairn.dev/cairn/pkg/dnsserver"
)

// dnsTTL is the TTL of the harness's names.
const dnsTTL = 30

// dnsServer answers Config.Names on BridgeAddr port 53, UDP and TCP,
// inside the namespace: the resolver the DHCP server hands out when a
// test names hosts. Every other name is answered "no such name". Its two
// goroutines serve until close cancels them.
type dnsServer struct {
	cancel context.CancelFunc
	done   chan error
}

// startDNS opens the server's sockets inside the namespace and starts
// serving names.
func (n *Network) startDNS(names map[string]netip.Addr) (*dnsServer, error) {
	addr := netip.AddrPortFrom(BridgeAddr, 53)
	var conn *net.UDPConn
	var ln net.Listener
	err := n.Do(func() error {
		var err error
		if conn, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(addr)); err != nil {
			return err
		}
		if ln, err = net.Listen("tcp4", addr.String()); err != nil {
			conn.Close()
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("when opening the DNS sockets: %w", err)
	}
	srv := dnsserver.New(dnsserver.Config{Zone: dnsserver.Hosts(dnsTTL, names), Logf: n.log})
	ctx, cancel := context.WithCancel(context.Background())
	s := &dnsServer{cancel: cancel, done: make(chan error, 2)}
	go func() { s.done <- srv.ServeUDP(ctx, conn) }()
	go func() { s.done <- srv.ServeTCP(ctx, ln) }()
	return s, nil
}

// close stops the server and waits for both sockets' loops to end.
func (s *dnsServer) close() error {
	s.cancel()
	var errs []error
	for range 2 {
		if err := <-s.done; !errors.Is(err, context.Canceled) {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("dns server: %w", err)
	}
	return nil
}
