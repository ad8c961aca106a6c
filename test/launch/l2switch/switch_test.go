package l2switch

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Test MAC addresses, and the EtherType of test frames (IEEE 802 local
// experimental).
var (
	macA      = [6]byte{0x52, 0x54, 0x00, 0x00, 0x00, 0x0a}
	macB      = [6]byte{0x52, 0x54, 0x00, 0x00, 0x00, 0x0b}
	macC      = [6]byte{0x52, 0x54, 0x00, 0x00, 0x00, 0x0c}
	macX      = [6]byte{0x52, 0x54, 0x00, 0x00, 0x00, 0x99}
	broadcast = [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
)

const testEtherType = 0x88b5

// frame builds a test frame of size bytes (at least 18) that carries seq
// after its header.
func frame(dst, src [6]byte, seq uint32, size int) []byte {
	f := make([]byte, max(size, headerLen+4))
	copy(f[0:6], dst[:])
	copy(f[6:12], src[:])
	binary.BigEndian.PutUint16(f[12:14], testEtherType)
	binary.BigEndian.PutUint32(f[14:18], seq)
	for i := headerLen + 4; i < len(f); i++ {
		f[i] = byte(i)
	}
	return f
}

func seqOf(f []byte) uint32 { return binary.BigEndian.Uint32(f[14:18]) }

func newSwitch(t testing.TB, p Profile) *Switch {
	t.Helper()
	s, err := New(Config{Profile: p, Logf: t.Logf})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// udpMachine stands in for qemu behind a port of AttachDgram: a UDP
// socket on the loopback.
type udpMachine struct {
	c    *net.UDPConn
	port *Port
}

func attachUDP(t testing.TB, s *Switch, name string) *udpMachine {
	t.Helper()
	c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.1:0")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetReadBuffer(socketBuffer)
	p, err := s.AttachDgram(name, netip.MustParseAddrPort("127.0.0.1:0"), unmap(c.LocalAddr().(*net.UDPAddr).AddrPort()))
	if err != nil {
		t.Fatalf("AttachDgram(%s): %v", name, err)
	}
	return &udpMachine{c: c, port: p}
}

func (m *udpMachine) send(t testing.TB, f []byte) {
	t.Helper()
	if _, err := m.c.WriteToUDPAddrPort(f, m.port.Addr()); err != nil {
		t.Fatalf("sending to port %s: %v", m.port.Name(), err)
	}
}

// recv returns the next frame the machine receives within timeout, or
// nil.
func (m *udpMachine) recv(t testing.TB, timeout time.Duration) []byte {
	t.Helper()
	m.c.SetReadDeadline(time.Now().Add(timeout))
	buf := make([]byte, MaxFrame)
	n, err := m.c.Read(buf)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return nil
	}
	if err != nil {
		t.Fatalf("receiving on %s: %v", m.port.Name(), err)
	}
	return buf[:n]
}

// seqMachine stands in for a machine behind a port of AttachFrames: one
// end of a SOCK_SEQPACKET socket pair, the switch holding the other.
// Unlike UDP, a full socket makes the writer wait instead of dropping, so
// every frame the switch sends arrives: what is missing, the switch
// dropped.
type seqMachine struct {
	f    *os.File
	port *Port
}

func attachSeq(t testing.TB, s *Switch, name string) *seqMachine {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("socketpair: %v", err)
	}
	mine := os.NewFile(uintptr(fds[1]), name+"-machine")
	// The switch first, so that it does not see its machine leave.
	t.Cleanup(func() {
		s.Close()
		mine.Close()
	})
	p, err := s.AttachFrames(name, os.NewFile(uintptr(fds[0]), name+"-switch"))
	if err != nil {
		t.Fatalf("AttachFrames(%s): %v", name, err)
	}
	return &seqMachine{f: mine, port: p}
}

func (m *seqMachine) send(t testing.TB, f []byte) {
	t.Helper()
	if _, err := m.f.Write(f); err != nil {
		t.Fatalf("sending to port %s: %v", m.port.Name(), err)
	}
}

// arrival is a frame as a machine received it.
type arrival struct {
	seq uint32
	at  time.Time
}

// recvAll receives frames until timeout passes without one.
func (m *seqMachine) recvAll(t testing.TB, quiet time.Duration) []arrival {
	t.Helper()
	var got []arrival
	buf := make([]byte, MaxFrame)
	for {
		m.f.SetReadDeadline(time.Now().Add(quiet))
		n, err := m.f.Read(buf)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return got
		}
		if err != nil {
			t.Fatalf("receiving on %s: %v", m.port.Name(), err)
		}
		got = append(got, arrival{seq: seqOf(buf[:n]), at: time.Now()})
	}
}

func TestForwarding(t *testing.T) {
	s := newSwitch(t, Profile{})
	a, b, c := attachUDP(t, s, "a"), attachUDP(t, s, "b"), attachUDP(t, s, "c")
	machines := map[string]*udpMachine{"a": a, "b": b, "c": c}

	for _, step := range []struct {
		name  string
		from  *udpMachine
		frame []byte
		want  []string
	}{
		{"broadcast floods", a, frame(broadcast, macA, 1, 60), []string{"b", "c"}},
		{"unicast to a learnt address", b, frame(macA, macB, 2, 1514), []string{"a"}},
		{"unicast to an unknown address floods", a, frame(macX, macA, 3, 100), []string{"b", "c"}},
		{"learnt from b's frame", a, frame(macB, macA, 4, 64), []string{"b"}},
		{"multicast floods", c, frame([6]byte{0x01, 0x00, 0x5e, 0, 0, 1}, macC, 5, 64), []string{"a", "b"}},
		{"to the sender's own port goes nowhere", b, frame(macB, macB, 6, 64), nil},
		{"runt goes nowhere", c, []byte{1, 2, 3}, nil},
	} {
		step.from.send(t, step.frame)
		for _, name := range step.want {
			got := machines[name].recv(t, 5*time.Second)
			if !bytes.Equal(got, step.frame) {
				t.Errorf("%s: %s received %x, want %x", step.name, name, got, step.frame)
			}
		}
	}
	// Nothing else arrives anywhere.
	for name, m := range machines {
		if got := m.recv(t, 200*time.Millisecond); got != nil {
			t.Errorf("%s received an extra frame %x", name, got)
		}
	}
	if got := c.port.Stats().Runts; got != 1 {
		t.Errorf("port c counted %d runts, want 1", got)
	}
	st := a.port.Stats()
	if st.ReceivedFrames != 3 || st.SentFrames != 2 {
		t.Errorf("port a: %v; want 3 frames received, 2 sent", st)
	}
}

func TestDgramPortIgnoresStrangers(t *testing.T) {
	s := newSwitch(t, Profile{})
	a, b := attachUDP(t, s, "a"), attachUDP(t, s, "b")
	stranger, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.1:0")))
	if err != nil {
		t.Fatal(err)
	}
	defer stranger.Close()
	stranger.WriteToUDPAddrPort(frame(broadcast, macX, 1, 60), a.port.Addr())
	want := frame(broadcast, macA, 2, 60)
	a.send(t, want)
	if got := b.recv(t, 5*time.Second); !bytes.Equal(got, want) {
		t.Errorf("b received %x, want only a's frame %x", got, want)
	}
	if got := a.port.Stats().ReceivedFrames; got != 1 {
		t.Errorf("port a received %d frames, want 1: the stranger's is not the machine's", got)
	}
}

func TestAttach(t *testing.T) {
	s := newSwitch(t, Profile{})
	attachSeq(t, s, "a")
	if _, err := s.AttachDgram("a", netip.MustParseAddrPort("127.0.0.1:0"), netip.MustParseAddrPort("127.0.0.1:9")); err == nil {
		t.Error("a second port called a was attached")
	}
	if _, err := s.AttachDgram("b", netip.MustParseAddrPort("127.0.0.1:0"), netip.AddrPort{}); err == nil {
		t.Error("a port without a peer was attached")
	}
	if p := s.Port("a"); p == nil || p.Name() != "a" {
		t.Errorf("Port(a) = %v", p)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := s.AttachDgram("c", netip.MustParseAddrPort("127.0.0.1:0"), netip.MustParseAddrPort("127.0.0.1:9")); err == nil {
		t.Error("a port was attached to a closed switch")
	}
}

func TestNewPicksASeed(t *testing.T) {
	a, b := newSwitch(t, Profile{}), newSwitch(t, Profile{})
	if a.Profile().Seed == 0 || a.Profile().Seed == b.Profile().Seed {
		t.Errorf("seeds of two switches without one: %d and %d, want two different ones", a.Profile().Seed, b.Profile().Seed)
	}
	if got := newSwitch(t, Profile{Seed: 42}).Profile().Seed; got != 42 {
		t.Errorf("seed = %d, want 42", got)
	}
	if _, err := New(Config{Profile: Profile{Impairment: Impairment{Loss: 2}}}); err == nil {
		t.Error("New with a loss of 200% succeeded")
	}
}
