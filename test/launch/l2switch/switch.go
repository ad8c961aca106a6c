package l2switch

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// MaxFrame is the largest frame a port reads; larger ones are cut short
// by the socket. qemu's network cards send at most 64 KiB.
const MaxFrame = 64 << 10

// headerLen is an Ethernet header: destination, source, EtherType.
const headerLen = 14

// Config describes a switch.
type Config struct {
	// Profile impairs every link between two ports, in each direction on
	// its own, and seeds the links' random numbers. The zero Profile
	// impairs nothing (with a random seed).
	Profile Profile
	// Logf receives a line when a port stops for an error other than
	// Close. Nil discards it. It is not called once Close has begun, so
	// t.Logf is safe here.
	Logf func(format string, args ...any)
}

// Switch is a learning Ethernet switch whose links impair the frames
// that cross them. Its methods are safe for concurrent use.
//
// Its goroutines, all in wg: one per port reads frames from the machine
// behind it and forwards them (ingress), until Close closes the port's
// connection; one per port writes the frames that waited (egress.run),
// until Close closes done.
type Switch struct {
	profile Profile
	logf    func(format string, args ...any)

	macs macTable
	// cut holds the ports of the side a partition cut off, or nil.
	cut atomic.Pointer[map[*Port]bool]
	// ports is every port, for flooding; replaced, never changed.
	ports atomic.Pointer[[]*Port]

	mu        sync.Mutex
	byName    map[string]*Port
	links     map[[2]*Port]*link
	overrides map[[2]*Port]Impairment
	closed    bool

	done chan struct{}
	wg   sync.WaitGroup

	closeOnce sync.Once
	closeErr  error
}

// New makes a switch without ports. Always Close it.
func New(cfg Config) (*Switch, error) {
	if err := cfg.Profile.Validate(); err != nil {
		return nil, fmt.Errorf("switch profile: %w", err)
	}
	p := cfg.Profile
	for p.Seed == 0 {
		p.Seed = rand.Uint64()
	}
	s := &Switch{
		profile:   p,
		logf:      cfg.Logf,
		macs:      macTable{m: map[[6]byte]*Port{}},
		byName:    map[string]*Port{},
		links:     map[[2]*Port]*link{},
		overrides: map[[2]*Port]Impairment{},
		done:      make(chan struct{}),
	}
	s.ports.Store(&[]*Port{})
	return s, nil
}

// Profile returns the switch's profile, with the seed New picked if the
// Config left it zero: the profile that replays this run.
func (s *Switch) Profile() Profile { return s.profile }

// AttachDgram adds a port for a machine that sends and receives frames
// as UDP datagrams, one frame each, such as qemu's
//
//	-netdev dgram,id=net0,
//	    local.type=inet,local.host=<peer's addr>,local.port=<peer's port>,
//	    remote.type=inet,remote.host=<Addr's addr>,remote.port=<Addr's port>
//
// The switch listens on local (port 0 takes a free one: see Port.Addr)
// and exchanges frames with peer alone; the socket lives in the network
// namespace of the calling thread. Frames for peer before it listens are
// lost, as on a cable that is not plugged in.
func (s *Switch) AttachDgram(name string, local, peer netip.AddrPort) (*Port, error) {
	if !peer.IsValid() || peer.Port() == 0 {
		return nil, fmt.Errorf("port %s: peer %v is not an address and port", name, peer)
	}
	c, err := listenDgram(local, peer)
	if err != nil {
		return nil, fmt.Errorf("when opening port %s: %w", name, err)
	}
	return s.attach(name, c)
}

// AttachFrames adds a port for a machine reached through rw, whose reads
// and writes each carry one whole frame: a tap's file, or one end of a
// SOCK_SEQPACKET socket pair. The switch closes rw when it closes.
func (s *Switch) AttachFrames(name string, rw io.ReadWriteCloser) (*Port, error) {
	return s.attach(name, streamConn{rw: rw})
}

func (s *Switch) attach(name string, c frameConn) (*Port, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		c.Close()
		return nil, fmt.Errorf("port %s: switch closed", name)
	case name == "":
		c.Close()
		return nil, errors.New("a port needs a name")
	case s.byName[name] != nil:
		c.Close()
		return nil, fmt.Errorf("port %s exists already", name)
	}
	p := &Port{sw: s, name: name, conn: c}
	p.egress = newEgress(p)
	s.byName[name] = p
	ports := append(append([]*Port(nil), *s.ports.Load()...), p)
	s.ports.Store(&ports)
	s.wg.Go(func() { s.ingress(p) })
	s.wg.Go(func() { p.egress.run(s.done) })
	return p, nil
}

// Port returns the port called name, or nil.
func (s *Switch) Port(name string) *Port {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.byName[name]
}

// Ports returns every port, in the order they were attached.
func (s *Switch) Ports() []*Port {
	return append([]*Port(nil), *s.ports.Load()...)
}

// SetLinkImpairment changes how the link from one port to another
// impairs its frames from now on, instead of the Profile's; the link the
// other way is left as it is. Frames already on their way keep their
// fate: when the delay shrinks, the next frames may overtake them.
func (s *Switch) SetLinkImpairment(from, to *Port, imp Impairment) error {
	if err := imp.Validate(); err != nil {
		return fmt.Errorf("link %s → %s: %w", from.name, to.name, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	key := [2]*Port{from, to}
	s.overrides[key] = imp
	if l := s.links[key]; l != nil {
		l.imp.Store(&imp)
	}
	return nil
}

// link returns the link from one port to another, making it on first
// use.
func (s *Switch) link(from, to *Port) *link {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := [2]*Port{from, to}
	if l := s.links[key]; l != nil {
		return l
	}
	imp, ok := s.overrides[key]
	if !ok {
		imp = s.profile.Impairment
	}
	l := newLink(from, to, s.profile.Seed, imp)
	s.links[key] = l
	return l
}

// Partition cuts the given ports off from every other port until Heal or
// the next Partition: no frame crosses between the two sides any more,
// not even one already on its way. Ports on the same side still reach
// each other. The ports must be this switch's.
func (s *Switch) Partition(ports ...*Port) {
	cut := map[*Port]bool{}
	for _, p := range ports {
		if p.sw != s {
			panic(fmt.Sprintf("l2switch: Partition of port %s of another switch", p.name))
		}
		cut[p] = true
	}
	s.cut.Store(&cut)
}

// Heal ends the partition: every port reaches every other again.
func (s *Switch) Heal() { s.cut.Store(nil) }

// separated reports whether a partition stands between two ports.
func (s *Switch) separated(a, b *Port) bool {
	cut := s.cut.Load()
	return cut != nil && (*cut)[a] != (*cut)[b]
}

// ingress reads the frames of p's machine and forwards each, until p's
// connection fails or is closed.
func (s *Switch) ingress(p *Port) {
	buf := make([]byte, MaxFrame)
	// links caches this port's links, which only this goroutine uses.
	links := map[*Port]*link{}
	for {
		n, err := p.conn.readFrame(buf)
		if err != nil {
			if !s.isClosed() {
				s.log("port %s: %v; it forwards nothing any more", p.name, err)
			}
			return
		}
		s.forward(p, buf[:n], links)
	}
}

// forward sends a frame that came in through port in on to its
// destination, or floods it to every other port when the destination is
// a group address or unknown. It learns the port of the source address.
func (s *Switch) forward(in *Port, frame []byte, links map[*Port]*link) {
	in.stats.receivedFrames.Add(1)
	in.stats.receivedBytes.Add(uint64(len(frame)))
	if len(frame) < headerLen {
		in.stats.runts.Add(1)
		return
	}
	dst, src := [6]byte(frame[0:6]), [6]byte(frame[6:12])
	if !isGroup(src) {
		s.macs.learn(src, in)
	}
	f := inFrame{data: frame}
	now := time.Now()
	if !isGroup(dst) {
		if out := s.macs.lookup(dst); out != nil {
			if out != in {
				s.send(in, out, &f, now, links)
			}
			return
		}
	}
	for _, out := range *s.ports.Load() {
		if out != in {
			s.send(in, out, &f, now, links)
		}
	}
}

func (s *Switch) send(in, out *Port, f *inFrame, now time.Time, links map[*Port]*link) {
	if s.separated(in, out) {
		out.stats.cut.Add(1)
		return
	}
	l := links[out]
	if l == nil {
		l = s.link(in, out)
		links[out] = l
	}
	l.pass(f, now)
}

// isGroup reports whether a MAC address is a broadcast or multicast
// address.
func isGroup(mac [6]byte) bool { return mac[0]&1 != 0 }

func (s *Switch) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

func (s *Switch) log(format string, args ...any) {
	if s.logf != nil && !s.isClosed() {
		s.logf(format, args...)
	}
}

// Close closes every port and waits for the switch's goroutines. Frames
// still on their way are dropped. It is safe to call more than once and
// concurrently; every call returns the first call's result.
func (s *Switch) Close() error {
	s.closeOnce.Do(func() { s.closeErr = s.close() })
	return s.closeErr
}

func (s *Switch) close() error {
	s.mu.Lock()
	s.closed = true
	ports := *s.ports.Load()
	s.mu.Unlock()
	var errs []error
	for _, p := range ports {
		if err := p.conn.Close(); err != nil && !errors.Is(err, net.ErrClosed) && !errors.Is(err, os.ErrClosed) {
			errs = append(errs, fmt.Errorf("when closing port %s: %w", p.name, err))
		}
	}
	close(s.done)
	s.wg.Wait()
	return errors.Join(errs...)
}

// macTable maps each source address the switch has seen to the port it
// came through last. Entries never age: machines do not move between
// ports, and a machine that does is learnt again by its next frame.
type macTable struct {
	mu sync.RWMutex
	m  map[[6]byte]*Port
}

func (t *macTable) learn(mac [6]byte, p *Port) {
	t.mu.RLock()
	known := t.m[mac] == p
	t.mu.RUnlock()
	if known {
		return
	}
	t.mu.Lock()
	t.m[mac] = p
	t.mu.Unlock()
}

func (t *macTable) lookup(mac [6]byte) *Port {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.m[mac]
}
