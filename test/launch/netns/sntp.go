package netns

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"

	"cairn.dev/cairn/pkg/sntp"
)

// sntpServer serves the host's time to the nodes, on BridgeAddr port 123
// inside the namespace: the NTP server the DHCP server hands out. Its
// goroutine runs the server's loop until close closes the socket.
type sntpServer struct {
	srv  *sntp.Server
	done chan error
	once sync.Once
	err  error
}

// startSNTP opens the server's socket inside the namespace and starts
// serving.
func (n *Network) startSNTP() (*sntpServer, error) {
	var conn net.PacketConn
	err := n.Do(func() error {
		var err error
		conn, err = net.ListenPacket("udp4", netip.AddrPortFrom(BridgeAddr, sntp.Port).String())
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("when opening SNTP socket: %w", err)
	}
	s := &sntpServer{srv: sntp.NewServer(conn), done: make(chan error, 1)}
	go func() { s.done <- s.srv.Serve() }()
	return s, nil
}

// close stops the server and waits for its loop to end.
func (s *sntpServer) close() error {
	s.once.Do(func() {
		err := errors.Join(s.srv.Close(), <-s.done)
		if err != nil {
			s.err = fmt.Errorf("sntp server: %w", err)
		}
	})
	return s.err
}
