// Package dnsserver answers DNS over UDP and TCP: the questions a Zone
// holds it answers itself, the others it forwards to upstream resolvers
// and relays their answers unchanged. Each worker node runs one for its
// cluster's DNS (the zone of Services and pods), and the test harness runs
// one for the few names of its network.
//
//	client ──query──▶ Server ──Zone holds the name?──yes──▶ answer built here
//	                                    │ no
//	                                    ▼
//	                         Upstreams, in order, UDP or TCP as the client
//	                         asked: the first valid answer is relayed
//
// Why not a full DNS server library: a node needs an authoritative answer
// for a handful of record types and a forwarder, and golang.org/x/net's
// dnsmessage parses and builds every message that takes. Malformed
// queries get FORMERR or no answer; nothing a client sends can stop the
// server, and forwarded queries are bounded in number and in time.
package dnsserver

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// Answer is what a Zone says about one question.
type Answer struct {
	// RCode is dnsmessage.RCodeSuccess, with records or without (the name
	// exists, but has none of the type asked), RCodeNameError (no such
	// name), or RCodeServerFailure (the zone cannot answer yet).
	RCode dnsmessage.RCode
	// Records are the answer section.
	Records []dnsmessage.Resource
	// Authority is the zone's SOA record, which an answer without records
	// carries so that resolvers know how long to remember it. Optional.
	Authority *dnsmessage.Resource
}

// A Zone answers the questions about the names it holds; ok false means
// the name is not in the zone, and the question is forwarded. It must be
// safe for concurrent use.
type Zone func(q dnsmessage.Question) (a Answer, ok bool)

// Config is a server's configuration.
type Config struct {
	// Zone answers what it holds. Nil holds nothing: every question is
	// forwarded.
	Zone Zone
	// Allow reports whether a client may ask anything: others are
	// answered REFUSED. Nil allows every client.
	Allow func(client netip.Addr) bool
	// Upstreams returns the resolvers questions outside the zone go to,
	// tried in order. Nil or none answers those questions REFUSED.
	Upstreams func() []netip.AddrPort
	// Logf receives a line for each failure to serve a client (not for
	// each query). Nil discards them.
	Logf func(format string, args ...any)
}

const (
	// maxInFlight bounds the forwarded UDP queries and the TCP
	// connections served at once; more get SERVFAIL or are closed.
	maxInFlight = 256
	// upstreamTimeout bounds one upstream's answer to one query, and
	// forwardTimeout all of them: a client hears SERVFAIL before its own
	// resolver gives up (5 s for glibc and Go).
	upstreamTimeout = 1500 * time.Millisecond
	forwardTimeout  = 4 * time.Second
	// tcpIdleTimeout closes a TCP connection that sends no query for
	// this long.
	tcpIdleTimeout = 10 * time.Second
	// plainUDPSize is the largest UDP answer to a client that did not
	// say it takes more (RFC 1035).
	plainUDPSize = 512
	// maxUDPSize is the largest UDP answer sent whatever the client says:
	// the size that avoids fragmentation on every usual path.
	maxUDPSize = 1232
)

// Server serves one Config. Its Serve methods may run at once, on
// several sockets.
type Server struct {
	cfg   Config
	slots chan struct{}
}

// New returns a server of cfg.
func New(cfg Config) *Server {
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	return &Server{cfg: cfg, slots: make(chan struct{}, maxInFlight)}
}

// ServeUDP answers the queries that arrive on conn until ctx ends, then
// closes conn and returns once every forwarded query it started is done.
func (s *Server) ServeUDP(ctx context.Context, conn *net.UDPConn) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	buf := make([]byte, 65535)
	for {
		n, from, err := conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("when reading a DNS query: %w", err)
		}
		query := append([]byte(nil), buf[:n]...)
		reply, forward := s.answerLocally(query, from.Addr(), false)
		if forward {
			select {
			case s.slots <- struct{}{}:
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer func() { <-s.slots }()
					s.send(conn, s.forward(ctx, query, false), from)
				}()
				continue
			default:
				reply = failure(query, dnsmessage.RCodeServerFailure)
			}
		}
		s.send(conn, reply, from)
	}
}

// send writes reply (if any) to a UDP client.
func (s *Server) send(conn *net.UDPConn, reply []byte, to netip.AddrPort) {
	if reply == nil {
		return
	}
	if _, err := conn.WriteToUDPAddrPort(reply, to); err != nil {
		s.cfg.Logf("DNS: answering %s: %v", to, err)
	}
}

// ServeTCP answers queries on the connections ln accepts until ctx ends,
// then closes ln and every connection and returns once they are done.
func (s *Server) ServeTCP(ctx context.Context, ln net.Listener) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	for {
		conn, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return fmt.Errorf("when accepting a DNS connection: %w", err)
		}
		select {
		case s.slots <- struct{}{}:
		default:
			conn.Close()
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-s.slots }()
			stop := context.AfterFunc(ctx, func() { conn.Close() })
			defer stop()
			defer conn.Close()
			s.serveConn(ctx, conn)
		}()
	}
}

// serveConn answers the queries of one TCP connection, one after the
// other, until it is idle, closed or sends something unreadable.
func (s *Server) serveConn(ctx context.Context, conn net.Conn) {
	from := netip.AddrPortFrom(netip.IPv4Unspecified(), 0)
	if a, ok := conn.RemoteAddr().(*net.TCPAddr); ok {
		from = a.AddrPort()
	}
	for {
		conn.SetDeadline(time.Now().Add(tcpIdleTimeout))
		query, err := readTCP(conn)
		if err != nil {
			return
		}
		reply, forward := s.answerLocally(query, from.Addr().Unmap(), true)
		if forward {
			reply = s.forward(ctx, query, true)
		}
		if reply == nil {
			return
		}
		if err := writeTCP(conn, reply); err != nil {
			s.cfg.Logf("DNS: answering %s over TCP: %v", from, err)
			return
		}
	}
}

// readTCP reads one length-prefixed message.
func readTCP(r io.Reader) ([]byte, error) {
	var size [2]byte
	if _, err := io.ReadFull(r, size[:]); err != nil {
		return nil, err
	}
	msg := make([]byte, binary.BigEndian.Uint16(size[:]))
	if _, err := io.ReadFull(r, msg); err != nil {
		return nil, err
	}
	return msg, nil
}

// writeTCP writes one length-prefixed message.
func writeTCP(w io.Writer, msg []byte) error {
	if len(msg) > 65535 {
		return fmt.Errorf("DNS message of %d bytes is too long for TCP", len(msg))
	}
	_, err := w.Write(binary.BigEndian.AppendUint16(nil, uint16(len(msg))))
	if err == nil {
		_, err = w.Write(msg)
	}
	return err
}

// answerLocally answers query from client when the server can without
// asking anyone: a refusal, an error, or the zone's answer. forward true
// means the question is for the upstreams. A nil reply with forward
// false means: send nothing (the message was not a query).
func (s *Server) answerLocally(query []byte, client netip.Addr, tcp bool) (reply []byte, forward bool) {
	var p dnsmessage.Parser
	h, err := p.Start(query)
	if err != nil || h.Response {
		return nil, false
	}
	q, err := p.Question()
	if err != nil {
		return failure(query, dnsmessage.RCodeFormatError), false
	}
	if _, err := p.Question(); !errors.Is(err, dnsmessage.ErrSectionDone) {
		return failure(query, dnsmessage.RCodeFormatError), false
	}
	if h.OpCode != 0 {
		return failure(query, dnsmessage.RCodeNotImplemented), false
	}
	if s.cfg.Allow != nil && !s.cfg.Allow(client.Unmap()) {
		return failure(query, dnsmessage.RCodeRefused), false
	}
	edns, size := ednsSize(&p)
	if tcp {
		size = 65535
	}
	if s.cfg.Zone != nil {
		if a, ok := s.cfg.Zone(q); ok {
			reply, err := build(h, q, a, edns, size)
			if err != nil {
				s.cfg.Logf("DNS: building the answer to %s %s: %v", q.Name, q.Type, err)
				return failure(query, dnsmessage.RCodeServerFailure), false
			}
			return reply, false
		}
	}
	if s.cfg.Upstreams == nil {
		return failure(query, dnsmessage.RCodeRefused), false
	}
	return nil, true
}

// ednsSize reads the additional section of a query whose question p has
// parsed: whether it has an OPT record, and the UDP answer size it allows.
func ednsSize(p *dnsmessage.Parser) (edns bool, size int) {
	size = plainUDPSize
	if p.SkipAllQuestions() != nil || p.SkipAllAnswers() != nil || p.SkipAllAuthorities() != nil {
		return false, size
	}
	for {
		h, err := p.AdditionalHeader()
		if err != nil {
			return edns, size
		}
		if h.Type == dnsmessage.TypeOPT {
			edns = true
			size = min(max(int(h.Class), plainUDPSize), maxUDPSize)
		}
		if p.SkipAdditional() != nil {
			return edns, size
		}
	}
}

// build packs the answer a to question q of a query with header h. It
// carries an OPT record when the query did, and is truncated (TC, no
// records) when it exceeds size.
func build(h dnsmessage.Header, q dnsmessage.Question, a Answer, edns bool, size int) ([]byte, error) {
	m := dnsmessage.Message{
		Header: dnsmessage.Header{
			ID:                 h.ID,
			Response:           true,
			Authoritative:      true,
			RecursionDesired:   h.RecursionDesired,
			RecursionAvailable: true,
			RCode:              a.RCode,
		},
		Questions: []dnsmessage.Question{q},
		Answers:   a.Records,
	}
	if len(a.Records) == 0 && a.Authority != nil {
		m.Authorities = []dnsmessage.Resource{*a.Authority}
	}
	if edns {
		var opt dnsmessage.ResourceHeader
		if err := opt.SetEDNS0(maxUDPSize, dnsmessage.RCodeSuccess, false); err != nil {
			return nil, err
		}
		m.Additionals = []dnsmessage.Resource{{Header: opt, Body: &dnsmessage.OPTResource{}}}
	}
	out, err := m.Pack()
	if err != nil {
		return nil, err
	}
	if len(out) <= size {
		return out, nil
	}
	m.Header.Truncated = true
	m.Answers, m.Authorities = nil, nil
	return m.Pack()
}

// failure is the answer rcode to query, echoing its ID and question when
// they can be read. It is nil when query has no readable header.
func failure(query []byte, rcode dnsmessage.RCode) []byte {
	var p dnsmessage.Parser
	h, err := p.Start(query)
	if err != nil {
		return nil
	}
	m := dnsmessage.Message{Header: dnsmessage.Header{
		ID:                 h.ID,
		Response:           true,
		OpCode:             h.OpCode,
		RecursionDesired:   h.RecursionDesired,
		RecursionAvailable: true,
		RCode:              rcode,
	}}
	if q, err := p.Question(); err == nil {
		m.Questions = []dnsmessage.Question{q}
	}
	out, err := m.Pack()
	if err != nil {
		return nil
	}
	return out
}

// forward asks the upstreams query, in order, over TCP or UDP, and
// returns the first answer that matches it, or SERVFAIL when none does.
func (s *Server) forward(ctx context.Context, query []byte, tcp bool) []byte {
	id := binary.BigEndian.Uint16(query)
	ctx, cancel := context.WithTimeout(ctx, forwardTimeout)
	defer cancel()
	var errs []error
	for _, up := range s.cfg.Upstreams() {
		uctx, cancel := context.WithTimeout(ctx, upstreamTimeout)
		reply, err := exchange(uctx, up, query, tcp)
		cancel()
		if err == nil && len(reply) >= 12 && binary.BigEndian.Uint16(reply) == id {
			return reply
		}
		if err == nil {
			err = errors.New("answer does not match the query")
		}
		errs = append(errs, fmt.Errorf("%s: %w", up, err))
	}
	if len(errs) == 0 {
		errs = append(errs, errors.New("no upstream resolver"))
	}
	s.cfg.Logf("DNS: forwarding failed: %v", errors.Join(errs...))
	return failure(query, dnsmessage.RCodeServerFailure)
}

// exchange sends query to one upstream and reads its answer before ctx's
// deadline, which it must have.
func exchange(ctx context.Context, up netip.AddrPort, query []byte, tcp bool) ([]byte, error) {
	network := "udp"
	if tcp {
		network = "tcp"
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, network, up.String())
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	deadline, _ := ctx.Deadline()
	conn.SetDeadline(deadline)
	if tcp {
		if err := writeTCP(conn, query); err != nil {
			return nil, err
		}
		return readTCP(conn)
	}
	if _, err := conn.Write(query); err != nil {
		return nil, err
	}
	buf := make([]byte, 65535)
	for {
		n, err := conn.Read(buf)
		if err != nil {
			return nil, err
		}
		// A stray datagram with another ID is skipped, not taken.
		if n >= 12 && binary.BigEndian.Uint16(buf) == binary.BigEndian.Uint16(query) {
			return buf[:n], nil
		}
	}
}
