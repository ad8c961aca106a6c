package sntp

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"cairn.dev/cairn/pkg/fixture"
)

func TestTimestamps(t *testing.T) {
	for _, tc := range []struct {
		time string
		// secs is the NTP seconds field, -1 when not checked.
		secs int64
	}{
		{"1970-01-01T00:00:00Z", ntpEpochOffset},
		{"2026-01-01T00:00:00.123456789Z", -1},
		{"2036-02-07T06:28:15.999999999Z", 1<<32 - 1},
		// The first seconds of era 1.
		{"2036-02-07T06:28:16.5Z", 0},
		{"2036-02-07T06:28:17Z", 1},
		{"2104-01-01T00:00:00.000000001Z", -1},
	} {
		want, err := time.Parse(time.RFC3339Nano, tc.time)
		if err != nil {
			t.Fatal(err)
		}
		n := toNTP(want)
		if tc.secs >= 0 && int64(n>>32) != tc.secs {
			t.Errorf("toNTP(%s) seconds = %d, want %d", tc.time, n>>32, tc.secs)
		}
		if got := n.time(); !got.Equal(want) {
			t.Errorf("toNTP(%s).time() = %s, want the same time", tc.time, got.UTC().Format(time.RFC3339Nano))
		}
	}
	if got, want := shortDuration(0x00018000), 1500*time.Millisecond; got != want {
		t.Errorf("shortDuration(1.5 in 16.16) = %s, want %s", got, want)
	}
}

// shifted is a clock that runs d ahead of the system's.
func shifted(d time.Duration) func() time.Time {
	return func() time.Time { return time.Now().Add(d) }
}

// startServer runs a Server on loopback until the test ends.
func startServer(t *testing.T, opts ...ServerOption) netip.AddrPort {
	t.Helper()
	conn, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listening: %v", err)
	}
	s := NewServer(conn, opts...)
	done := make(chan error, 1)
	go func() { done <- s.Serve() }()
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if err := <-done; err != nil {
			t.Errorf("Serve returned %v after Close, want nil", err)
		}
	})
	return conn.LocalAddr().(*net.UDPAddr).AddrPort()
}

func TestQuery(t *testing.T) {
	for _, tc := range []struct {
		name          string
		server, local time.Duration
	}{
		{"same clock", 0, 0},
		{"server ahead", 90 * time.Minute, 0},
		{"local clock years behind", 0, -3 * 365 * 24 * time.Hour},
		{"local clock ahead", 0, 17 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := startServer(t, WithServerClock(shifted(tc.server)))
			r, err := Query(fixture.Context(t), addr, WithLocalClock(shifted(tc.local)))
			if err != nil {
				t.Fatalf("Query: %v", err)
			}
			want := tc.server - tc.local
			// Both clocks are the system's: the offset is off by at
			// most half the round trip, and the clock's resolution.
			if d := (r.Offset - want).Abs(); d > r.Delay/2+time.Millisecond {
				t.Errorf("Offset = %s, want %s ± %s", r.Offset, want, r.Delay/2)
			}
			if d := r.Time.Sub(time.Now().Add(tc.server)).Abs(); d > time.Second {
				t.Errorf("Time = %s, want the server's time, %s", r.Time, time.Now().Add(tc.server))
			}
			if r.Server != addr || r.Stratum != 1 || r.Leap != LeapNone || r.Delay < 0 {
				t.Errorf("Response = %+v, want server %s, stratum 1, no leap, a delay", r, addr)
			}
		})
	}
}

// startMangler runs a server on loopback that answers like Server, then
// passes its answer through mangle, until the test ends.
func startMangler(t *testing.T, mangle func(*packet) []byte) netip.AddrPort {
	t.Helper()
	conn, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listening: %v", err)
	}
	s := NewServer(conn)
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 1024)
		for {
			n, peer, err := conn.ReadFrom(buf)
			if err != nil {
				return
			}
			b, err := s.reply(buf[:n], time.Now())
			if err != nil {
				t.Errorf("test server's reply: %v", err)
				return
			}
			p, _ := parsePacket(b)
			conn.WriteTo(mangle(p), peer)
		}
	}()
	t.Cleanup(func() {
		conn.Close()
		<-done
	})
	return conn.LocalAddr().(*net.UDPAddr).AddrPort()
}

func TestQueryRefusesBadAnswers(t *testing.T) {
	kiss := func(code string) func(*packet) []byte {
		return func(p *packet) []byte {
			p.stratum = 0
			copy(p.referenceID[:], code)
			return p.marshal()
		}
	}
	for _, tc := range []struct {
		name   string
		mangle func(*packet) []byte
		// check judges Query's error.
		check func(error) bool
		// ignored: the answer is not taken for one, and Query times
		// out with want in its error.
		ignored bool
		want    string
	}{
		{name: "kiss RATE", mangle: kiss("RATE"), check: func(err error) bool {
			var k *KissError
			return errors.As(err, &k) && k.Code == "RATE" && !k.Refused()
		}},
		{name: "kiss DENY", mangle: kiss("DENY"), check: func(err error) bool {
			var k *KissError
			return errors.As(err, &k) && k.Code == "DENY" && k.Refused()
		}},
		{name: "kiss in binary", mangle: kiss("\x01\x02\x03\x04"), want: `"01020304"`},
		{name: "unsynchronized", mangle: func(p *packet) []byte { p.leap = LeapNotSync; return p.marshal() },
			check: func(err error) bool { return errors.Is(err, ErrUnsynchronized) }},
		{name: "stratum 16", mangle: func(p *packet) []byte { p.stratum = 16; return p.marshal() },
			check: func(err error) bool { return errors.Is(err, ErrUnsynchronized) }},
		{name: "version 0", mangle: func(p *packet) []byte { p.version = 0; return p.marshal() }, want: "version 0"},
		{name: "no transmit time", mangle: func(p *packet) []byte { p.transmit = 0; return p.marshal() }, want: "transmit time"},
		{name: "sent before received", mangle: func(p *packet) []byte {
			p.transmit = p.receive - 1<<32
			return p.marshal()
		}, want: "before its request was received"},
		{name: "uncertain server", mangle: func(p *packet) []byte { p.rootDispersion = 2 << 16; return p.marshal() }, want: "root distance"},
		{name: "another origin", mangle: func(p *packet) []byte { p.origin++; return p.marshal() }, ignored: true, want: "origin"},
		{name: "client mode", mangle: func(p *packet) []byte { p.mode = modeClient; return p.marshal() }, ignored: true, want: "mode 3"},
		{name: "short", mangle: func(p *packet) []byte { return p.marshal()[:47] }, ignored: true, want: "47 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := startMangler(t, tc.mangle)
			ctx := fixture.Context(t)
			if tc.ignored {
				ctx = fixture.ContextTimeout(t, 500*time.Millisecond)
			}
			r, err := Query(ctx, addr)
			switch {
			case err == nil:
				t.Fatalf("Query = %+v, want an error", r)
			case tc.ignored && !errors.Is(err, context.DeadlineExceeded):
				t.Errorf("Query = %v, want it to wait out its deadline", err)
			case tc.check != nil && !tc.check(err):
				t.Errorf("Query = %v (%T), not the error wanted", err, errors.Unwrap(err))
			case !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), addr.String()):
				t.Errorf("Query = %v, want an error naming %s and %q", err, addr, tc.want)
			}
		})
	}
}

func TestQueryFailsFast(t *testing.T) {
	// A port nothing listens on: the kernel's port unreachable ends the
	// query at once, not at its deadline.
	conn, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := conn.LocalAddr().(*net.UDPAddr).AddrPort()
	conn.Close()
	if _, err := Query(fixture.Context(t), closed); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("Query of a closed port = %v, want %v", err, syscall.ECONNREFUSED)
	}

	// A server that never answers, and a query that is cancelled.
	silent, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	ctx, cancel := context.WithCancel(fixture.Context(t))
	time.AfterFunc(100*time.Millisecond, cancel)
	if _, err := Query(ctx, silent.LocalAddr().(*net.UDPAddr).AddrPort()); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled Query = %v, want %v", err, context.Canceled)
	}
}

func TestServerReply(t *testing.T) {
	s := NewServer(nil)
	request := func(mod func(*packet)) []byte {
		p := &packet{version: 4, mode: modeClient, poll: 6, transmit: 0x0123456789abcdef}
		if mod != nil {
			mod(p)
		}
		return p.marshal()
	}
	received := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	b, err := s.reply(request(nil), received)
	if err != nil {
		t.Fatalf("reply to a good request: %v", err)
	}
	p, err := parsePacket(b)
	if err != nil {
		t.Fatal(err)
	}
	if p.mode != modeServer || p.version != 4 || p.stratum != 1 || p.poll != 6 || p.origin != 0x0123456789abcdef ||
		!p.receive.time().Equal(received) || p.transmit == 0 || string(p.referenceID[:]) != "LOCL" {
		t.Errorf("reply = %+v, want a stratum 1 answer echoing the request", p)
	}
	for name, bad := range map[string][]byte{
		"server mode": request(func(p *packet) { p.mode = modeServer }),
		"version 5":   request(func(p *packet) { p.version = 5 }),
		"short":       request(nil)[:40],
	} {
		if _, err := s.reply(bad, received); err == nil {
			t.Errorf("reply to a request with %s succeeded, want none", name)
		}
	}
}

// FuzzMeasure feeds the client's checks whatever a network can send as an
// answer. What they accept must make a usable measurement.
func FuzzMeasure(f *testing.F) {
	now := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	good := &packet{version: 4, mode: modeServer, stratum: 2, origin: 42, receive: toNTP(now), transmit: toNTP(now.Add(time.Millisecond))}
	f.Add(good.marshal())
	good.stratum = 0
	f.Add(good.marshal())
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := parsePacket(b)
		if err != nil || answers(p, p.origin) != nil {
			return
		}
		r, err := measure(netip.MustParseAddrPort("192.0.2.1:123"), p, now, now.Add(10*time.Millisecond))
		if err != nil {
			return
		}
		if r.Delay < 0 || r.RootDistance() >= maxRootDistance || r.Stratum == 0 || r.Stratum > maxStratum || r.Leap == LeapNotSync {
			t.Errorf("accepted answer %+v", r)
		}
	})
}

// FuzzServerReply feeds the server whatever can arrive on its port. What
// it answers must be a server's answer to that request.
func FuzzServerReply(f *testing.F) {
	f.Add((&packet{version: 4, mode: modeClient, transmit: 7}).marshal())
	f.Add((&packet{version: 3, mode: modeServer}).marshal())
	s := NewServer(nil)
	f.Fuzz(func(t *testing.T, b []byte) {
		reply, err := s.reply(b, time.Now())
		if err != nil {
			return
		}
		req, _ := parsePacket(b)
		p, err := parsePacket(reply)
		if err != nil || p.mode != modeServer || p.origin != req.transmit || p.version != req.version {
			t.Errorf("reply to %x = %+v, %v; want a server answer to it", b, p, err)
		}
	})
}
