package timesync

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cairn.dev/cairn/pkg/event"
	"cairn.dev/cairn/pkg/event/memory"
	"cairn.dev/cairn/pkg/sntp"
	"cairn.dev/cairn/pkg/supervisor/supervisortest"
)

// fakeClock is a clock offset from the system's by an amount that step
// and slew change at once. It records the corrections it was asked for.
type fakeClock struct {
	mu      sync.Mutex
	offset  time.Duration
	steps   []time.Duration
	slews   []time.Duration
	stepErr error
}

func newFakeClock(offset time.Duration) *fakeClock { return &fakeClock{offset: offset} }

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.offset)
}

func (c *fakeClock) step(d time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stepErr != nil {
		return c.stepErr
	}
	c.steps = append(c.steps, d)
	c.offset += d
	return nil
}

func (c *fakeClock) slew(d time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.slews = append(c.slews, d)
	c.offset += d
	return nil
}

// shift moves the clock by d, as drift or a paused machine would.
func (c *fakeClock) shift(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.offset += d
}

func (c *fakeClock) setStepErr(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stepErr = err
}

// corrections returns the steps and slews so far.
func (c *fakeClock) corrections() (steps, slews []time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.steps...), append([]time.Duration(nil), c.slews...)
}

// fastTiming polls every few tens of milliseconds.
var fastTiming = timing{minPoll: 20 * time.Millisecond, maxPoll: 80 * time.Millisecond, firstRetry: 20 * time.Millisecond, query: time.Second}

// startServers runs an SNTP server on each of addrs (loopback addresses
// such as 127.0.0.2), all on one free port, until the test ends; a nil
// clock is the system's. It returns the port.
func startServers(t *testing.T, clocks map[netip.Addr]func() time.Time) uint16 {
	t.Helper()
	for range 10 {
		var conns []net.PacketConn
		var port uint16
		ok := true
		for a := range clocks {
			c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(a, port)))
			if err != nil {
				ok = false
				break
			}
			conns = append(conns, c)
			port = c.LocalAddr().(*net.UDPAddr).AddrPort().Port()
		}
		if !ok {
			for _, c := range conns {
				c.Close()
			}
			continue
		}
		for _, c := range conns {
			a := c.LocalAddr().(*net.UDPAddr).AddrPort().Addr()
			var opts []sntp.ServerOption
			if now := clocks[a]; now != nil {
				opts = append(opts, sntp.WithServerClock(now))
			}
			s := sntp.NewServer(c, opts...)
			done := make(chan error, 1)
			go func() { done <- s.Serve() }()
			t.Cleanup(func() {
				s.Close()
				if err := <-done; err != nil {
					t.Errorf("SNTP server on %s: %v", a, err)
				}
			})
		}
		return port
	}
	t.Fatalf("found no port free on all of %v", clocks)
	return 0
}

var (
	server1 = netip.MustParseAddr("127.0.0.1")
	server2 = netip.MustParseAddr("127.0.0.2")
)

// run starts a Service with the fake clock under a test supervisor, asking
// servers on port, and returns the Values it reads and writes.
func run(t *testing.T, clock *fakeClock, port uint16, servers []netip.Addr) (*memory.Value[[]netip.Addr], *memory.Value[State]) {
	t.Helper()
	sv := &memory.Value[[]netip.Addr]{}
	if servers != nil {
		sv.Set(servers)
	}
	state := &memory.Value[State]{}
	tm := fastTiming
	svc := New(Config{Servers: sv, State: state, clock: clock, port: port, timing: &tm})
	supervisortest.Harness(t, svc.Run)
	return sv, state
}

// waitState waits until the published state satisfies pred, and returns
// it.
func waitState(t *testing.T, state event.Watchable[State], what string, pred func(State) bool) State {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	st, err := event.Get(ctx, state, event.Filter(pred))
	if err != nil {
		t.Fatalf("waiting for the clock's state to be %s: %v", what, err)
	}
	return st
}

func synchronizedWith(a netip.Addr) func(State) bool {
	return func(st State) bool { return st.Sync == Synchronized && st.Server == a }
}

// near says whether got is want, give or take tolerance.
func near(got, want, tolerance time.Duration) bool { return (got - want).Abs() <= tolerance }

// TestFirstAnswerSteps boots with a clock three hours behind: the first
// answer steps it, later ones slew what is left.
func TestFirstAnswerSteps(t *testing.T) {
	port := startServers(t, map[netip.Addr]func() time.Time{server1: nil})
	clock := newFakeClock(-3 * time.Hour)
	_, state := run(t, clock, port, []netip.Addr{server1})

	st := waitState(t, state, "synchronized", synchronizedWith(server1))
	if !near(st.Offset, 3*time.Hour, 100*time.Millisecond) {
		t.Errorf("state's offset = %s, want the 3h the clock was behind", st.Offset)
	}
	if d := time.Until(st.LastSync).Abs(); d > time.Second {
		t.Errorf("state's last sync = %s, want about now, by the corrected clock", st.LastSync)
	}
	if st.Reason != "" {
		t.Errorf("state's reason = %q, want none while synchronized", st.Reason)
	}
	// Some later answers.
	waitState(t, state, "synchronized again", func(s State) bool { return s.LastSync.After(st.LastSync) })
	steps, slews := clock.corrections()
	if len(steps) != 1 || !near(steps[0], 3*time.Hour, 100*time.Millisecond) {
		t.Errorf("steps = %v, want one of 3h", steps)
	}
	if len(slews) == 0 {
		t.Errorf("no slews after the step, want later answers slewed")
	}
	if d := time.Until(clock.now()).Abs(); d > 100*time.Millisecond {
		t.Errorf("the clock is %s off after synchronizing, want nearly nothing", d)
	}
}

// TestSlewAndStepAfterSync checks the corrections of a synchronized
// clock: offsets up to MaxOffset are slewed, larger ones stepped.
func TestSlewAndStepAfterSync(t *testing.T) {
	port := startServers(t, map[netip.Addr]func() time.Time{server1: nil})
	clock := newFakeClock(50 * time.Millisecond)
	_, state := run(t, clock, port, []netip.Addr{server1})

	st := waitState(t, state, "synchronized", synchronizedWith(server1))
	if steps, slews := clock.corrections(); len(steps) != 0 || len(slews) == 0 || !near(slews[0], -50*time.Millisecond, 20*time.Millisecond) {
		t.Errorf("first answer for a clock 50ms ahead: steps %v, slews %v; want a slew of -50ms and no step", steps, slews)
	}

	// Drift past the step threshold, but within MaxOffset: slewed.
	clock.shift(600 * time.Millisecond)
	st = waitState(t, state, "a 600ms offset measured", func(s State) bool { return near(s.Offset, -600*time.Millisecond, 50*time.Millisecond) })
	if steps, _ := clock.corrections(); len(steps) != 0 {
		t.Errorf("steps %v for a 600ms offset after synchronizing, want it slewed", steps)
	}

	// A jump past MaxOffset: stepped.
	clock.shift(-30 * time.Second)
	waitState(t, state, "a 30s offset measured", func(s State) bool { return near(s.Offset, 30*time.Second, 50*time.Millisecond) })
	if steps, _ := clock.corrections(); len(steps) != 1 || !near(steps[0], 30*time.Second, 50*time.Millisecond) {
		t.Errorf("steps %v after a jump of 30s, want one of 30s", steps)
	}
	if st.Sync != Synchronized {
		t.Errorf("state = %+v, want synchronized throughout", st)
	}
}

// TestNextServer gives a first server that does not answer: the second
// one's answer is used.
func TestNextServer(t *testing.T) {
	port := startServers(t, map[netip.Addr]func() time.Time{server2: nil})
	clock := newFakeClock(time.Minute)
	_, state := run(t, clock, port, []netip.Addr{server1, server2})
	st := waitState(t, state, "synchronized with the second server", synchronizedWith(server2))
	if !near(st.Offset, -time.Minute, 100*time.Millisecond) {
		t.Errorf("offset = %s, want -1m", st.Offset)
	}
}

// TestServersChange starts without servers, then gets some, and moves to
// others when the list changes.
func TestServersChange(t *testing.T) {
	port := startServers(t, map[netip.Addr]func() time.Time{server1: nil, server2: nil})
	clock := newFakeClock(0)
	servers, state := run(t, clock, port, nil)
	if st := waitState(t, state, "published", func(State) bool { return true }); st.Sync != Unsynchronized {
		t.Errorf("state without servers = %+v, want unsynchronized", st)
	}
	servers.Set(nil)
	servers.Set([]netip.Addr{server1})
	waitState(t, state, "synchronized with the first server", synchronizedWith(server1))
	servers.Set([]netip.Addr{server2})
	waitState(t, state, "synchronized with the second server", synchronizedWith(server2))
}

func TestKnownWrong(t *testing.T) {
	t.Run("before the floor", func(t *testing.T) {
		port := startServers(t, map[netip.Addr]func() time.Time{server1: nil})
		clock := newFakeClock(time.Until(Floor) - 24*time.Hour)
		servers, state := run(t, clock, port, nil)
		st := waitState(t, state, "known wrong", func(s State) bool { return s.Sync == KnownWrong })
		if !strings.Contains(st.Reason, "before "+Floor.Format(time.RFC3339)) {
			t.Errorf("reason = %q, want it to name the floor", st.Reason)
		}
		c := &Clock{state: state, now: clock.now}
		if err := c.Check(); !errors.Is(err, ErrKnownWrong) {
			t.Errorf("Check of a clock before the floor = %v, want %v", err, ErrKnownWrong)
		}
		servers.Set([]netip.Addr{server1})
		waitState(t, state, "synchronized", synchronizedWith(server1))
		if err := c.Check(); err != nil {
			t.Errorf("Check after synchronizing = %v, want nil", err)
		}
	})

	t.Run("stepping fails", func(t *testing.T) {
		port := startServers(t, map[netip.Addr]func() time.Time{server1: nil})
		clock := newFakeClock(-time.Hour)
		clock.setStepErr(errors.New("operation not permitted"))
		_, state := run(t, clock, port, []netip.Addr{server1})
		st := waitState(t, state, "known wrong", func(s State) bool { return s.Sync == KnownWrong })
		for _, want := range []string{"127.0.0.1", "1h0m", "stepping it failed", "operation not permitted"} {
			if !strings.Contains(st.Reason, want) {
				t.Errorf("reason = %q, want %q in it", st.Reason, want)
			}
		}
		c := &Clock{state: state, now: clock.now}
		if err := c.Check(); !errors.Is(err, ErrKnownWrong) || !strings.Contains(err.Error(), "stepping it failed") {
			t.Errorf("Check = %v, want %v with the reason", err, ErrKnownWrong)
		}
		// The next attempt succeeds.
		clock.setStepErr(nil)
		waitState(t, state, "synchronized", synchronizedWith(server1))
		if err := c.Check(); err != nil {
			t.Errorf("Check after the step = %v, want nil", err)
		}
	})

	t.Run("server before the floor", func(t *testing.T) {
		past := Floor.Add(-365 * 24 * time.Hour)
		port := startServers(t, map[netip.Addr]func() time.Time{
			server1: func() time.Time { return past },
			server2: nil,
		})
		clock := newFakeClock(0)
		_, state := run(t, clock, port, []netip.Addr{server1, server2})
		// The first server is not believed; the second is.
		waitState(t, state, "synchronized with the second server", synchronizedWith(server2))
		if steps, _ := clock.corrections(); len(steps) != 0 {
			t.Errorf("steps = %v, want none: the first server's time is not believed", steps)
		}
	})
}

// TestNoHotLoop points the service at a server that never answers: it
// must wait between queries, longer and longer.
func TestNoHotLoop(t *testing.T) {
	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var requests atomic.Int32
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 100)
		for {
			if _, _, err := conn.ReadFrom(buf); err != nil {
				return
			}
			requests.Add(1)
		}
	}()
	defer func() { conn.Close(); <-done }()

	clock := newFakeClock(0)
	sv := &memory.Value[[]netip.Addr]{}
	sv.Set([]netip.Addr{server1})
	state := &memory.Value[State]{}
	tm := timing{minPoll: 400 * time.Millisecond, maxPoll: 400 * time.Millisecond, firstRetry: 100 * time.Millisecond, query: 50 * time.Millisecond}
	cancel, _ := supervisortest.Harness(t, New(Config{Servers: sv, State: state, clock: clock, port: conn.LocalAddr().(*net.UDPAddr).AddrPort().Port(), timing: &tm}).Run)
	time.Sleep(2 * time.Second)
	cancel()
	// Queries of 50ms, then waits of 100, 200, 400, 400... ms: about
	// eight in two seconds. A hot loop sends thousands.
	if n := requests.Load(); n < 2 || n > 20 {
		t.Errorf("%d queries in 2s to a silent server, want a few, spaced by a growing backoff", n)
	}
	st, err := event.Get(t.Context(), state, event.BacklogOnly[State]())
	if err != nil || st.Sync != Unsynchronized {
		t.Errorf("state = %+v, %v; want unsynchronized", st, err)
	}
}

func TestRetryBackoff(t *testing.T) {
	b := New(Config{}).newRetryBackoff()
	want := []time.Duration{16, 32, 64, 128, 256, 512, 1024, 1024, 1024}
	for i, w := range want {
		w *= time.Second
		if got := b.NextBackOff(); got < w*9/10 || got > w*11/10 {
			t.Errorf("wait %d = %s, want %s ± 10%%", i, got, w)
		}
	}
}

func TestClockCheck(t *testing.T) {
	after := func() time.Time { return Floor.Add(time.Hour) }
	before := func() time.Time { return Floor.Add(-time.Hour) }
	value := func(st State) *memory.Value[State] {
		v := &memory.Value[State]{}
		v.Set(st)
		return v
	}
	for _, tc := range []struct {
		name  string
		state event.Watchable[State]
		now   func() time.Time
		want  string // "" for no error
	}{
		{name: "no state", now: after},
		{name: "no state, before the floor", now: before, want: "before 2026-01-01T00:00:00Z"},
		{name: "nothing published", state: &memory.Value[State]{}, now: after},
		{name: "unsynchronized", state: value(State{Sync: Unsynchronized}), now: after},
		{name: "synchronized", state: value(State{Sync: Synchronized, Server: server1}), now: after},
		{name: "synchronized, before the floor", state: value(State{Sync: Synchronized}), now: before, want: "no Cairn build predates"},
		{name: "known wrong", state: value(State{Sync: KnownWrong, Reason: "the server says so"}), now: after, want: "the server says so"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := NewClock(tc.state)
			c.now = tc.now
			err := c.Check()
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("Check() = %v, want nil", err)
			case tc.want != "" && (!errors.Is(err, ErrKnownWrong) || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("Check() = %v, want %v saying %q", err, ErrKnownWrong, tc.want)
			}
		})
	}
	if err := CheckFloor(time.Unix(0, 0)); !errors.Is(err, ErrKnownWrong) || !strings.Contains(err.Error(), "1970-01-01T00:00:00Z") {
		t.Errorf("CheckFloor(1970) = %v, want %v naming the time", err, ErrKnownWrong)
	}
	if err := CheckFloor(Floor); err != nil {
		t.Errorf("CheckFloor(Floor) = %v, want nil", err)
	}
}

func TestSyncString(t *testing.T) {
	for s, want := range map[Sync]string{Unsynchronized: "unsynchronized", Synchronized: "synchronized", KnownWrong: "known wrong", 7: "Sync(7)"} {
		if got := fmt.Sprint(s); got != want {
			t.Errorf("Sync(%d).String() = %q, want %q", int(s), got, want)
		}
	}
}
