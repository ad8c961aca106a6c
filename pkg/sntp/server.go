package sntp

import (
	"errors"
	"fmt"
	"net"
	"time"
)

// serverPrecision is the precision the server claims, as a power of two
// in seconds: about a microsecond, what Go's clock gives on Linux.
const serverPrecision = -20

// Server answers SNTP requests with the time of its clock. It claims
// stratum 1 with reference "LOCL", a local clock without a reference of
// its own: it passes on the time of the machine it runs on, as good as
// that is. It has no access control and no rate limit, and is meant for
// networks that a test or a lab controls.
type Server struct {
	conn        net.PacketConn
	now         func() time.Time
	stratum     uint8
	referenceID [4]byte
}

// ServerOption changes what a Server answers.
type ServerOption func(*Server)

// WithServerClock makes the server answer with the time of now instead of
// the system clock (time.Now): a test can have it run ahead or behind.
func WithServerClock(now func() time.Time) ServerOption {
	return func(s *Server) { s.now = now }
}

// NewServer returns a server that answers the requests arriving on conn,
// a UDP socket (usually on Port). It does nothing until Serve.
func NewServer(conn net.PacketConn, opts ...ServerOption) *Server {
	s := &Server{conn: conn, now: time.Now, stratum: 1, referenceID: [4]byte{'L', 'O', 'C', 'L'}}
	for _, opt := range opts {
		opt(s)
	}
	return s
}

// Serve answers requests until the socket is closed (by Close), and then
// returns nil; another error reading the socket is returned. It runs on
// the caller's goroutine and starts no other. Datagrams that are not SNTP
// requests get no answer.
func (s *Server) Serve() error {
	buf := make([]byte, 1024)
	for {
		n, peer, err := s.conn.ReadFrom(buf)
		received := s.now()
		if errors.Is(err, net.ErrClosed) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("when reading a request: %w", err)
		}
		reply, err := s.reply(buf[:n], received)
		if err != nil {
			continue
		}
		// A failed write loses one answer; the client asks again.
		s.conn.WriteTo(reply, peer)
	}
}

// Close closes the socket, which ends Serve.
func (s *Server) Close() error {
	if err := s.conn.Close(); err != nil {
		return fmt.Errorf("when closing the SNTP server's socket: %w", err)
	}
	return nil
}

// reply returns the answer to the request b, received at the given time
// by the server's clock, or an error saying why it gets none.
func (s *Server) reply(b []byte, received time.Time) ([]byte, error) {
	req, err := parsePacket(b)
	if err != nil {
		return nil, err
	}
	if req.mode != modeClient {
		return nil, fmt.Errorf("packet of mode %d, not a client request", req.mode)
	}
	if req.version < 1 || req.version > 4 {
		return nil, fmt.Errorf("request of NTP version %d", req.version)
	}
	p := &packet{
		leap:        LeapNone,
		version:     req.version,
		mode:        modeServer,
		stratum:     s.stratum,
		poll:        req.poll,
		precision:   serverPrecision,
		referenceID: s.referenceID,
		// The server's clock is its own reference, current at every
		// moment.
		reference: toNTP(received),
		origin:    req.transmit,
		receive:   toNTP(received),
	}
	p.transmit = toNTP(s.now())
	return p.marshal(), nil
}
