package l2switch

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync/atomic"
)

// Port is one port of a switch: the machine behind it, reached through a
// frame connection, its queue of frames waiting to leave, and its
// counters.
type Port struct {
	sw     *Switch
	name   string
	conn   frameConn
	egress *egress
	stats  portCounters
}

// Name returns the port's name.
func (p *Port) Name() string { return p.name }

// Addr returns the switch's own UDP address of a port made by
// AttachDgram, where the machine behind it sends its frames; the zero
// AddrPort for other ports.
func (p *Port) Addr() netip.AddrPort { return p.conn.addr() }

// deliver writes a frame from port from to the machine behind p, unless
// a partition separates the two ports now.
func (p *Port) deliver(from *Port, data []byte) {
	if p.sw.separated(from, p) {
		p.stats.cut.Add(1)
		return
	}
	if err := p.conn.writeFrame(data); err != nil {
		p.stats.failed.Add(1)
		return
	}
	p.stats.sentFrames.Add(1)
	p.stats.sentBytes.Add(uint64(len(data)))
}

// frameConn carries whole Ethernet frames to and from the machine behind
// a port: one frame per read and per write.
type frameConn interface {
	readFrame(b []byte) (int, error)
	writeFrame(b []byte) error
	addr() netip.AddrPort
	io.Closer
}

// dgramConn is a UDP socket that exchanges frames with one peer, the way
// qemu's -netdev dgram does: one datagram per frame, no header.
type dgramConn struct {
	c    *net.UDPConn
	peer netip.AddrPort
}

// socketBuffer is the send and receive buffer a UDP port asks for: room
// for a burst of full frames. The kernel caps it (net.core.rmem_max and
// wmem_max).
const socketBuffer = 4 << 20

func listenDgram(local, peer netip.AddrPort) (*dgramConn, error) {
	c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(local))
	if err != nil {
		return nil, err
	}
	// Best effort: a smaller buffer only drops more under bursts.
	_ = c.SetReadBuffer(socketBuffer)
	_ = c.SetWriteBuffer(socketBuffer)
	return &dgramConn{c: c, peer: unmap(peer)}, nil
}

// readFrame returns the next datagram from the peer. Datagrams from
// anywhere else are not the machine's frames and are dropped.
func (d *dgramConn) readFrame(b []byte) (int, error) {
	for {
		n, from, err := d.c.ReadFromUDPAddrPort(b)
		if err != nil {
			return 0, err
		}
		if unmap(from) == d.peer {
			return n, nil
		}
	}
}

func (d *dgramConn) writeFrame(b []byte) error {
	_, err := d.c.WriteToUDPAddrPort(b, d.peer)
	return err
}

func (d *dgramConn) addr() netip.AddrPort {
	return unmap(d.c.LocalAddr().(*net.UDPAddr).AddrPort())
}

func (d *dgramConn) Close() error { return d.c.Close() }

func unmap(a netip.AddrPort) netip.AddrPort {
	return netip.AddrPortFrom(a.Addr().Unmap(), a.Port())
}

// streamConn is a connection that keeps the boundaries of what is
// written to it, such as a tap's file or a SOCK_SEQPACKET socket: each
// read returns one frame, each write sends one.
type streamConn struct {
	rw io.ReadWriteCloser
}

func (s streamConn) readFrame(b []byte) (int, error) {
	n, err := s.rw.Read(b)
	if n == 0 && err == nil {
		err = io.ErrNoProgress
	}
	return n, err
}

func (s streamConn) writeFrame(b []byte) error {
	n, err := s.rw.Write(b)
	if err == nil && n != len(b) {
		err = fmt.Errorf("wrote %d of %d bytes: %w", n, len(b), io.ErrShortWrite)
	}
	return err
}

func (streamConn) addr() netip.AddrPort { return netip.AddrPort{} }

func (s streamConn) Close() error { return s.rw.Close() }

// PortStats counts what happened to the frames of one port. The frames
// a link lost, doubled, held back or cut are counted on the port they
// were going to.
type PortStats struct {
	// ReceivedFrames and ReceivedBytes came in from the machine behind
	// the port.
	ReceivedFrames, ReceivedBytes uint64
	// SentFrames and SentBytes went out to the machine behind the port.
	SentFrames, SentBytes uint64
	// Lost frames were dropped by the links into the port (Loss).
	Lost uint64
	// Duplicated frames were sent twice (Duplicate).
	Duplicated uint64
	// Reordered frames were held back outside their link's order
	// (Reorder).
	Reordered uint64
	// Cut frames were dropped because a partition separated the port
	// from the port they came from.
	Cut uint64
	// Overflow frames were dropped because MaxQueued frames waited for
	// the port already.
	Overflow uint64
	// Failed frames could not be written, as when nothing listens behind
	// the port.
	Failed uint64
	// Runts were frames from the machine too short to be Ethernet,
	// dropped.
	Runts uint64
}

func (s PortStats) String() string {
	return fmt.Sprintf("received %d frames (%d bytes), sent %d (%d bytes); lost %d, duplicated %d, reordered %d, cut %d, overflow %d, failed %d, runts %d",
		s.ReceivedFrames, s.ReceivedBytes, s.SentFrames, s.SentBytes,
		s.Lost, s.Duplicated, s.Reordered, s.Cut, s.Overflow, s.Failed, s.Runts)
}

// Stats returns the port's counters so far.
func (p *Port) Stats() PortStats {
	c := &p.stats
	return PortStats{
		ReceivedFrames: c.receivedFrames.Load(),
		ReceivedBytes:  c.receivedBytes.Load(),
		SentFrames:     c.sentFrames.Load(),
		SentBytes:      c.sentBytes.Load(),
		Lost:           c.lost.Load(),
		Duplicated:     c.duplicated.Load(),
		Reordered:      c.reordered.Load(),
		Cut:            c.cut.Load(),
		Overflow:       c.overflow.Load(),
		Failed:         c.failed.Load(),
		Runts:          c.runts.Load(),
	}
}

type portCounters struct {
	receivedFrames, receivedBytes atomic.Uint64
	sentFrames, sentBytes         atomic.Uint64
	lost, duplicated, reordered   atomic.Uint64
	cut, overflow, failed, runts  atomic.Uint64
}
