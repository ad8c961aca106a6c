package dnsserver

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

// serve runs a server of cfg on a UDP socket and a TCP listener of the
// same loopback port until the test ends, and returns that address.
func serve(t *testing.T, cfg Config) netip.AddrPort {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().(*net.TCPAddr).AddrPort()
	conn, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(addr))
	if err != nil {
		ln.Close()
		t.Fatal(err)
	}
	s := New(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 2)
	go func() { done <- s.ServeUDP(ctx, conn) }()
	go func() { done <- s.ServeTCP(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		for range 2 {
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Errorf("server ended with %v, want context.Canceled", err)
			}
		}
	})
	return addr
}

// ask sends one question to server and parses the answer.
func ask(t *testing.T, server netip.AddrPort, name string, typ dnsmessage.Type, tcp bool) dnsmessage.Message {
	t.Helper()
	q := dnsmessage.Message{
		Header:    dnsmessage.Header{ID: 4242, RecursionDesired: true},
		Questions: []dnsmessage.Question{{Name: dnsmessage.MustNewName(name), Type: typ, Class: dnsmessage.ClassINET}},
	}
	query, err := q.Pack()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*forwardTimeout)
	defer cancel()
	reply, err := exchange(ctx, server, query, tcp)
	if err != nil {
		t.Fatalf("asking %s for %s %s (tcp %v): %v", server, name, typ, tcp, err)
	}
	var m dnsmessage.Message
	if err := m.Unpack(reply); err != nil {
		t.Fatalf("answer to %s %s: %v", name, typ, err)
	}
	if m.ID != 4242 || !m.Response {
		t.Fatalf("answer to %s %s has ID %d, response %v", name, typ, m.ID, m.Response)
	}
	return m
}

// addrs lists the A records of m.
func addrs(m dnsmessage.Message) []string {
	var out []string
	for _, r := range m.Answers {
		if a, ok := r.Body.(*dnsmessage.AResource); ok {
			out = append(out, netip.AddrFrom4(a.A).String())
		}
	}
	return out
}

func TestZoneAndForwarding(t *testing.T) {
	upstream := serve(t, Config{Zone: Hosts(30, map[string]netip.Addr{"registry.test": netip.MustParseAddr("10.42.0.1")})})
	soa := A(dnsmessage.MustNewName("zone.test."), 5, netip.MustParseAddr("192.0.2.99"))
	zone := func(q dnsmessage.Question) (Answer, bool) {
		name := Canonical(q.Name.String())
		switch {
		case !strings.HasSuffix(name, ".zone.test."):
			return Answer{}, false
		case name == "many.zone.test.":
			var rs []dnsmessage.Resource
			for i := range 100 {
				rs = append(rs, A(q.Name, 5, netip.AddrFrom4([4]byte{192, 0, 2, byte(i)})))
			}
			return Answer{Records: rs}, true
		case name == "one.zone.test." && q.Type == dnsmessage.TypeA:
			return Answer{Records: []dnsmessage.Resource{A(q.Name, 5, netip.MustParseAddr("192.0.2.1"))}}, true
		case name == "one.zone.test.":
			return Answer{Authority: &soa}, true
		}
		return Answer{RCode: dnsmessage.RCodeNameError, Authority: &soa}, true
	}
	server := serve(t, Config{Zone: zone, Upstreams: func() []netip.AddrPort { return []netip.AddrPort{upstream} }})
	for _, tcp := range []bool{false, true} {
		for _, c := range []struct {
			name  string
			typ   dnsmessage.Type
			rcode dnsmessage.RCode
			want  []string
			soa   bool
		}{
			{"One.Zone.Test.", dnsmessage.TypeA, dnsmessage.RCodeSuccess, []string{"192.0.2.1"}, false},
			{"one.zone.test.", dnsmessage.TypeAAAA, dnsmessage.RCodeSuccess, nil, true},
			{"none.zone.test.", dnsmessage.TypeA, dnsmessage.RCodeNameError, nil, true},
			{"registry.test.", dnsmessage.TypeA, dnsmessage.RCodeSuccess, []string{"10.42.0.1"}, false},
			{"other.test.", dnsmessage.TypeA, dnsmessage.RCodeNameError, nil, false},
		} {
			m := ask(t, server, c.name, c.typ, tcp)
			if m.RCode != c.rcode || !slices.Equal(addrs(m), c.want) || (len(m.Authorities) == 1) != c.soa {
				t.Errorf("%s %s (tcp %v) = %v %v, %d authority records; want %v %v, SOA %v",
					c.name, c.typ, tcp, m.RCode, addrs(m), len(m.Authorities), c.rcode, c.want, c.soa)
			}
			if len(m.Questions) != 1 || m.Questions[0].Name.String() != c.name {
				t.Errorf("%s %s (tcp %v) echoes questions %v", c.name, c.typ, tcp, m.Questions)
			}
		}
	}
	// Too many records for 512 bytes: truncated over UDP, whole over TCP.
	if m := ask(t, server, "many.zone.test.", dnsmessage.TypeA, false); !m.Truncated || len(m.Answers) != 0 {
		t.Errorf("100 records over UDP: truncated %v with %d records, want truncated without", m.Truncated, len(m.Answers))
	}
	if m := ask(t, server, "many.zone.test.", dnsmessage.TypeA, true); m.Truncated || len(m.Answers) != 100 {
		t.Errorf("100 records over TCP: truncated %v with %d records, want all", m.Truncated, len(m.Answers))
	}
}

// TestGoResolver asks the server through Go's own resolver, as a program
// in a pod does.
func TestGoResolver(t *testing.T) {
	server := serve(t, Config{Zone: Hosts(30, map[string]netip.Addr{"agent.test": netip.MustParseAddr("192.0.2.7")})})
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, server.String())
	}}
	got, err := r.LookupHost(context.Background(), "agent.test")
	if err != nil || !slices.Equal(got, []string{"192.0.2.7"}) {
		t.Errorf("LookupHost(agent.test) = %v, %v; want [192.0.2.7]", got, err)
	}
	_, err = r.LookupHost(context.Background(), "nothing.test")
	var dnsErr *net.DNSError
	if !errors.As(err, &dnsErr) || !dnsErr.IsNotFound {
		t.Errorf("LookupHost(nothing.test) = %v, want not found", err)
	}
}

func TestRefusalsAndFailures(t *testing.T) {
	hosts := Hosts(30, map[string]netip.Addr{"a.test": netip.MustParseAddr("192.0.2.1")})
	refusing := serve(t, Config{Zone: hosts, Allow: func(a netip.Addr) bool { return !a.IsLoopback() }})
	if m := ask(t, refusing, "a.test.", dnsmessage.TypeA, false); m.RCode != dnsmessage.RCodeRefused || len(m.Answers) != 0 {
		t.Errorf("a client not allowed got %v with %d records, want REFUSED", m.RCode, len(m.Answers))
	}
	noUpstream := serve(t, Config{})
	if m := ask(t, noUpstream, "a.test.", dnsmessage.TypeA, false); m.RCode != dnsmessage.RCodeRefused {
		t.Errorf("a question without zone or upstream got %v, want REFUSED", m.RCode)
	}
	// An upstream that answers nothing: a UDP socket nobody reads.
	dead, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer dead.Close()
	deadUp := dead.LocalAddr().(*net.UDPAddr).AddrPort()
	silent := serve(t, Config{Upstreams: func() []netip.AddrPort { return []netip.AddrPort{deadUp} }})
	if m := ask(t, silent, "a.test.", dnsmessage.TypeA, false); m.RCode != dnsmessage.RCodeServerFailure {
		t.Errorf("a question whose upstream is silent got %v, want SERVFAIL", m.RCode)
	}
}

func TestMalformedQueries(t *testing.T) {
	s := New(Config{Zone: Hosts(30, nil)})
	ok, _ := (&dnsmessage.Message{
		Header:    dnsmessage.Header{ID: 1},
		Questions: []dnsmessage.Question{{Name: dnsmessage.MustNewName("a.test."), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET}},
	}).Pack()
	two, _ := (&dnsmessage.Message{
		Header: dnsmessage.Header{ID: 2},
		Questions: []dnsmessage.Question{
			{Name: dnsmessage.MustNewName("a.test."), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET},
			{Name: dnsmessage.MustNewName("b.test."), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET},
		},
	}).Pack()
	answer, _ := (&dnsmessage.Message{Header: dnsmessage.Header{ID: 3, Response: true}}).Pack()
	for _, c := range []struct {
		name  string
		query []byte
		rcode dnsmessage.RCode
		none  bool
	}{
		{"empty", nil, 0, true},
		{"short header", []byte{1, 2, 3}, 0, true},
		{"an answer", answer, 0, true},
		{"header only, no question", ok[:12], dnsmessage.RCodeFormatError, false},
		{"cut in the question", ok[:len(ok)-2], dnsmessage.RCodeFormatError, false},
		{"two questions", two, dnsmessage.RCodeFormatError, false},
		{"valid", ok, dnsmessage.RCodeNameError, false},
	} {
		reply, forward := s.answerLocally(c.query, netip.MustParseAddr("192.0.2.1"), false)
		if forward {
			t.Errorf("%s: forwarded", c.name)
			continue
		}
		if c.none {
			if reply != nil {
				t.Errorf("%s: answered %x, want nothing", c.name, reply)
			}
			continue
		}
		var m dnsmessage.Message
		if err := m.Unpack(reply); err != nil || m.RCode != c.rcode {
			t.Errorf("%s: answered %v (%v), want %v", c.name, m.RCode, err, c.rcode)
		}
	}
}

func FuzzAnswerLocally(f *testing.F) {
	q, _ := (&dnsmessage.Message{
		Header:    dnsmessage.Header{ID: 1},
		Questions: []dnsmessage.Question{{Name: dnsmessage.MustNewName("a.test."), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET}},
	}).Pack()
	f.Add(q)
	s := New(Config{Zone: Hosts(30, map[string]netip.Addr{"a.test": netip.MustParseAddr("192.0.2.1")})})
	f.Fuzz(func(t *testing.T, query []byte) {
		reply, _ := s.answerLocally(query, netip.MustParseAddr("192.0.2.1"), false)
		if len(reply) > plainUDPSize {
			t.Errorf("a UDP answer of %d bytes", len(reply))
		}
	})
}
