package l2switch

import (
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"
)

// path is a way from one UDP socket to another: straight over the
// loopback, or through a switch. Frames carry the destination's MAC
// address.
type path struct {
	tx  *net.UDPConn
	dst netip.AddrPort
	rx  *net.UDPConn
	// back is the way from rx to tx, for round trips.
	backDst netip.AddrPort
}

func loopbackPath(b *testing.B) path {
	b.Helper()
	a, c := listenLoopback(b), listenLoopback(b)
	return path{tx: a, dst: addrOf(c), rx: c, backDst: addrOf(a)}
}

// switchPath joins two machines through a switch with impairment imp and
// lets it learn both addresses.
func switchPath(b *testing.B, imp Impairment) path {
	b.Helper()
	s := newSwitch(b, Profile{Impairment: imp, Seed: 1})
	a, c := attachUDP(b, s, "a"), attachUDP(b, s, "c")
	a.send(b, frame(broadcast, macA, 0, 60))
	c.send(b, frame(broadcast, macC, 0, 60))
	if a.recv(b, 5*time.Second) == nil || c.recv(b, 5*time.Second) == nil {
		b.Fatal("the switch did not pass the first frames")
	}
	return path{tx: a.c, dst: a.port.Addr(), rx: c.c, backDst: c.port.Addr()}
}

func listenLoopback(b *testing.B) *net.UDPConn {
	b.Helper()
	c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.1:0")))
	if err != nil {
		b.Fatal(err)
	}
	c.SetReadBuffer(socketBuffer)
	c.SetWriteBuffer(socketBuffer)
	b.Cleanup(func() { c.Close() })
	return c
}

func addrOf(c *net.UDPConn) netip.AddrPort {
	return unmap(c.LocalAddr().(*net.UDPAddr).AddrPort())
}

// benchPaths are the paths each benchmark compares: the loopback alone
// is the floor; "switch" is the switch as the harness runs it without a
// profile's impairment; "queued" sends every frame through the egress
// queue, as any delay does.
var benchPaths = []struct {
	name string
	make func(*testing.B) path
}{
	{"loopback", loopbackPath},
	{"switch", func(b *testing.B) path { return switchPath(b, Impairment{}) }},
	{"queued", func(b *testing.B) path { return switchPath(b, Impairment{Delay: time.Nanosecond}) }},
}

// window is how many frames the throughput benchmark keeps in flight:
// few enough that no socket buffer overflows, so that no frame is lost.
const window = 64

// BenchmarkThroughput sends frames one way as fast as the receiver takes
// them, window frames in flight.
//
//	go test -run '^$' -bench . -benchmem ./test/launch/l2switch
func BenchmarkThroughput(b *testing.B) {
	for _, size := range []int{1514, 64} {
		for _, bp := range benchPaths {
			b.Run(fmt.Sprintf("%s/%dB", bp.name, size), func(b *testing.B) {
				p := bp.make(b)
				f := frame(macC, macA, 1, size)
				credit := make(chan struct{}, window)
				for range window {
					credit <- struct{}{}
				}
				failed := make(chan error, 1)
				go func() {
					buf := make([]byte, MaxFrame)
					for range b.N {
						p.rx.SetReadDeadline(time.Now().Add(5 * time.Second))
						if _, err := p.rx.Read(buf); err != nil {
							failed <- err
							return
						}
						credit <- struct{}{}
					}
					failed <- nil
				}()
				b.SetBytes(int64(size))
				b.ResetTimer()
				for range b.N {
					select {
					case <-credit:
					case err := <-failed:
						b.Fatalf("receiving: %v (a frame was lost)", err)
					}
					if _, err := p.tx.WriteToUDPAddrPort(f, p.dst); err != nil {
						b.Fatal(err)
					}
				}
				if err := <-failed; err != nil {
					b.Fatalf("receiving: %v (a frame was lost)", err)
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "frames/s")
			})
		}
	}
}

// BenchmarkRoundTrip sends one frame there and back at a time: the time
// per operation is two crossings. The switch's added latency per crossing
// is half the difference to the loopback's.
func BenchmarkRoundTrip(b *testing.B) {
	for _, bp := range benchPaths {
		b.Run(bp.name, func(b *testing.B) {
			p := bp.make(b)
			there, back := frame(macC, macA, 1, 100), frame(macA, macC, 2, 100)
			buf := make([]byte, MaxFrame)
			b.ResetTimer()
			for range b.N {
				p.tx.WriteToUDPAddrPort(there, p.dst)
				p.rx.SetReadDeadline(time.Now().Add(5 * time.Second))
				if _, err := p.rx.Read(buf); err != nil {
					b.Fatal(err)
				}
				p.rx.WriteToUDPAddrPort(back, p.backDst)
				p.tx.SetReadDeadline(time.Now().Add(5 * time.Second))
				if _, err := p.tx.Read(buf); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
