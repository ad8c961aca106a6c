package sntp

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"time"
)

// DefaultTimeout bounds an exchange whose context has no deadline of its
// own. A server on the same continent answers in well under a second.
const DefaultTimeout = 5 * time.Second

// maxRootDistance is RFC 5905's MAXDIST: a server whose time is known to
// be this uncertain, or more, is not used.
const maxRootDistance = 1500 * time.Millisecond

// ErrUnsynchronized is wrapped by the error of an answer from a server
// that says its own clock is not synchronized (leap indicator 3, or
// stratum 16 and above). Its time must not be used.
var ErrUnsynchronized = errors.New("the server's clock is not synchronized")

// KissError is a kiss-o'-death answer (RFC 5905, section 7.4): the server
// tells the client to go away (DENY, RSTR) or to ask less often (RATE).
type KissError struct {
	// Server is the server that sent it.
	Server netip.AddrPort
	// Code is the kiss code, four ASCII letters such as "RATE".
	Code string
}

func (e *KissError) Error() string {
	return fmt.Sprintf("%s sent kiss-o'-death %q", e.Server, e.Code)
}

// Refused tells whether the code asks the client to stop using the
// server altogether (DENY, RSTR), rather than to slow down.
func (e *KissError) Refused() bool { return e.Code == "DENY" || e.Code == "RSTR" }

// Response is a server's answer, measured against the local clock.
type Response struct {
	// Server is the server that answered.
	Server netip.AddrPort
	// Offset is how far the server's clock is ahead of the local one:
	// the local clock plus Offset is the server's time.
	Offset time.Duration
	// Delay is the round trip of the exchange, without the time the
	// server took to answer.
	Delay time.Duration
	// Time is the server's time when the answer arrived: the local
	// clock then, plus Offset.
	Time time.Time
	// Stratum is the server's distance from a reference clock: 1 for a
	// server with its own reference, n+1 for one synchronized to a
	// server of stratum n.
	Stratum uint8
	// Leap announces a leap second at the end of the day, if any.
	Leap Leap
	// RootDelay and RootDispersion are the server's own round trip to,
	// and uncertainty about, its reference clock.
	RootDelay, RootDispersion time.Duration
}

// RootDistance is how far the answer can be from the reference clock's
// time: half of the round trips to it, plus the server's uncertainty.
func (r *Response) RootDistance() time.Duration {
	return (r.RootDelay+r.Delay)/2 + r.RootDispersion
}

// QueryOption changes how Query measures.
type QueryOption func(*queryOptions)

type queryOptions struct {
	now func() time.Time
}

// WithLocalClock makes Query measure the offset of now, instead of the
// system clock's (time.Now). Elapsed time is still measured with Go's
// monotonic clock.
func WithLocalClock(now func() time.Time) QueryOption {
	return func(o *queryOptions) { o.now = now }
}

// Query asks server for the time, once, and returns its answer. ctx
// bounds the exchange; without a deadline Query waits DefaultTimeout for
// the answer. A request is sent once: a lost packet is a failed query,
// which the caller repeats as its policy says.
//
// Datagrams that are not an answer to this request (other modes, another
// origin timestamp, fewer than 48 bytes) are ignored while Query waits. An
// answer to it that cannot be used is an error: a *KissError for a
// kiss-o'-death, ErrUnsynchronized (wrapped) from a server that has no
// good time itself, and errors naming the problem for nonsense.
func Query(ctx context.Context, server netip.AddrPort, opts ...QueryOption) (*Response, error) {
	o := queryOptions{now: time.Now}
	for _, opt := range opts {
		opt(&o)
	}
	r, err := query(ctx, server, o)
	if err != nil {
		return nil, fmt.Errorf("when asking %s for the time: %w", server, err)
	}
	return r, nil
}

func query(ctx context.Context, server netip.AddrPort, o queryOptions) (*Response, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultTimeout)
		defer cancel()
	}
	// A connected socket: the kernel drops datagrams from anywhere else,
	// and an ICMP port unreachable fails the read at once.
	conn, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(server))
	if err != nil {
		return nil, fmt.Errorf("when opening a socket: %w", err)
	}
	defer conn.Close()
	deadline, _ := ctx.Deadline()
	if err := conn.SetDeadline(deadline); err != nil {
		return nil, fmt.Errorf("when setting the socket's deadline: %w", err)
	}
	// Cancelling ctx ends a read that waits.
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	var nonceBytes [8]byte
	rand.Read(nonceBytes[:])
	nonce := ntpTime(binary.BigEndian.Uint64(nonceBytes[:]) | 1)
	req := &packet{version: 4, mode: modeClient, transmit: nonce}
	t1 := o.now()
	start := time.Now()
	if _, err := conn.Write(req.marshal()); err != nil {
		return nil, fmt.Errorf("when sending the request: %w", err)
	}

	buf := make([]byte, 1024)
	var ignored error
	for {
		n, err := conn.Read(buf)
		t4 := t1.Add(time.Since(start))
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, os.ErrDeadlineExceeded) {
				// The socket's deadline is ctx's, and may pass a
				// moment before ctx says so.
				cause := ctx.Err()
				if cause == nil {
					cause = context.DeadlineExceeded
				}
				if ignored != nil {
					return nil, fmt.Errorf("no answer to this request (last datagram ignored: %v): %w", ignored, cause)
				}
				return nil, fmt.Errorf("no answer: %w", cause)
			}
			return nil, fmt.Errorf("when reading the answer: %w", err)
		}
		p, err := parsePacket(buf[:n])
		if err == nil {
			err = answers(p, nonce)
		}
		if err != nil {
			ignored = err
			continue
		}
		return measure(server, p, t1, t4)
	}
}

// answers tells whether p is a server's answer to the request with the
// given nonce.
func answers(p *packet, nonce ntpTime) error {
	if p.mode != modeServer {
		return fmt.Errorf("packet of mode %d, not a server's answer", p.mode)
	}
	if p.origin != nonce {
		return errors.New("answer's origin timestamp is not this request's")
	}
	return nil
}

// measure checks the server's answer p to a request sent at t1 (by the
// local clock) and received at t4, and computes the offset.
func measure(server netip.AddrPort, p *packet, t1, t4 time.Time) (*Response, error) {
	if p.stratum == 0 {
		return nil, &KissError{Server: server, Code: kissCode(p.referenceID)}
	}
	if p.leap == LeapNotSync || p.stratum > maxStratum {
		return nil, fmt.Errorf("%w (%s, stratum %d)", ErrUnsynchronized, p.leap, p.stratum)
	}
	if p.version < 1 || p.version > 4 {
		return nil, fmt.Errorf("answer has NTP version %d", p.version)
	}
	if p.receive == 0 || p.transmit == 0 {
		return nil, errors.New("answer lacks the server's receive or transmit time")
	}
	t2, t3 := p.receive.time(), p.transmit.time()
	if t3.Before(t2) {
		return nil, fmt.Errorf("answer was sent at %s, before its request was received at %s",
			t3.UTC().Format(time.RFC3339Nano), t2.UTC().Format(time.RFC3339Nano))
	}
	// Halves first: each difference may be near the limit of a Duration
	// when the local clock is decades off.
	offset := t2.Sub(t1)/2 + t3.Sub(t4)/2
	r := &Response{
		Server:         server,
		Offset:         offset,
		Delay:          max(t4.Sub(t1)-t3.Sub(t2), 0),
		Time:           t4.Add(offset),
		Stratum:        p.stratum,
		Leap:           p.leap,
		RootDelay:      shortDuration(p.rootDelay),
		RootDispersion: shortDuration(p.rootDispersion),
	}
	if d := r.RootDistance(); d >= maxRootDistance {
		return nil, fmt.Errorf("answer's root distance is %s, not under %s", d, maxRootDistance)
	}
	return r, nil
}

// kissCode is the reference ID of a kiss-o'-death as text: its ASCII
// letters, or hex when it has other bytes.
func kissCode(id [4]byte) string {
	s := strings.TrimRight(string(id[:]), "\x00")
	for _, c := range []byte(s) {
		if c < '!' || c > '~' {
			return fmt.Sprintf("%x", id)
		}
	}
	return s
}
