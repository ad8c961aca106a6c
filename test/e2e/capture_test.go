//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"cairn.dev/cairn/test/launch/netns"
)

// capture records every frame that crosses one interface of a harness
// network's namespace, as the wire carries it: a node's tap on the
// kernel's bridge, or, when a switch joins the nodes, the namespace's
// loopback, over which the switch and qemu pass the nodes' frames whole
// inside UDP.
type capture struct {
	fd      int
	wrapped bool // on the loopback: each frame inside UDP
	mu      sync.Mutex
	frames  [][]byte
	done    chan struct{}
}

// startCapture captures the frames of node i of network n until stop.
func startCapture(t *testing.T, n *netns.Network, i int) *capture {
	t.Helper()
	iface, wrapped := n.Node(i).Tap, false
	if iface == "" {
		iface, wrapped = "lo", true
	}
	c := &capture{wrapped: wrapped, done: make(chan struct{})}
	err := n.Do(func() error {
		ifi, err := net.InterfaceByName(iface)
		if err != nil {
			return err
		}
		proto := int(htons(unix.ETH_P_ALL))
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, proto)
		if err != nil {
			return fmt.Errorf("when opening a packet socket: %w", err)
		}
		if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifi.Index}); err != nil {
			unix.Close(fd)
			return fmt.Errorf("when binding to %s: %w", iface, err)
		}
		tv := unix.NsecToTimeval(int64(200 * time.Millisecond))
		if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
			unix.Close(fd)
			return err
		}
		c.fd = fd
		return nil
	})
	if err != nil {
		t.Fatalf("capturing on %s: %v", iface, err)
	}
	go c.read(c.fd)
	return c
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// read records the frames of fd until stop, waking every 200 ms to see
// whether it was called.
func (c *capture) read(fd int) {
	defer close(c.done)
	buf := make([]byte, 1<<16)
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
			c.mu.Lock()
			closed := c.fd < 0
			c.mu.Unlock()
			if closed {
				return
			}
			continue
		}
		if err != nil {
			return
		}
		c.mu.Lock()
		c.frames = append(c.frames, bytes.Clone(buf[:n]))
		c.mu.Unlock()
	}
}

// stop ends the capture and returns its frames, as the nodes sent them:
// unwrapped from the switch's UDP when captured on the loopback.
func (c *capture) stop() [][]byte {
	c.mu.Lock()
	fd := c.fd
	c.fd = -1
	c.mu.Unlock()
	<-c.done
	unix.Close(fd)
	if !c.wrapped {
		return c.frames
	}
	var out [][]byte
	for _, f := range c.frames {
		// Loopback's empty Ethernet header, IPv4 of 20 bytes, UDP.
		if p, ok := ipv4(f); ok && p.proto == unix.IPPROTO_UDP && len(p.payload) > 8 {
			out = append(out, p.payload[8:])
		}
	}
	return out
}

// packet is the IPv4 header of a frame, in part.
type packet struct {
	src, dst netip.Addr
	proto    byte
	payload  []byte
}

// ipv4 reads the IPv4 packet of an Ethernet frame.
func ipv4(frame []byte) (packet, bool) {
	if len(frame) < 14+20 || binary.BigEndian.Uint16(frame[12:14]) != unix.ETH_P_IP {
		return packet{}, false
	}
	ip := frame[14:]
	hl := int(ip[0]&0x0f) * 4
	if ip[0]>>4 != 4 || hl < 20 || len(ip) < hl {
		return packet{}, false
	}
	return packet{
		src:     netip.AddrFrom4([4]byte(ip[12:16])),
		dst:     netip.AddrFrom4([4]byte(ip[16:20])),
		proto:   ip[9],
		payload: ip[hl:],
	}, true
}

// containing counts the frames that hold text anywhere.
func containing(frames [][]byte, text string) int {
	n := 0
	for _, f := range frames {
		if bytes.Contains(f, []byte(text)) {
			n++
		}
	}
	return n
}

// udpBetween counts the UDP packets between a and b, either way, to or
// from port.
func udpBetween(frames [][]byte, a, b netip.Addr, port uint16) int {
	n := 0
	for _, f := range frames {
		p, ok := ipv4(f)
		if !ok || p.proto != unix.IPPROTO_UDP || len(p.payload) < 8 {
			continue
		}
		if !(p.src == a && p.dst == b) && !(p.src == b && p.dst == a) {
			continue
		}
		if sp, dp := binary.BigEndian.Uint16(p.payload[0:2]), binary.BigEndian.Uint16(p.payload[2:4]); sp == port || dp == port {
			n++
		}
	}
	return n
}

// getFromNetwork GETs / of addr over plain HTTP from the harness's side
// of network n (its bridge address), as any machine of the nodes'
// network could, with addr routed through via when via is valid (the
// route goes when it returns). It returns the answer's body.
func getFromNetwork(n *netns.Network, via netip.Addr, addr netip.AddrPort) (string, error) {
	var body []byte
	err := n.Do(func() error {
		if via.IsValid() {
			nl, err := netlink.NewHandle()
			if err != nil {
				return fmt.Errorf("when opening netlink: %w", err)
			}
			defer nl.Close()
			route := &netlink.Route{Dst: &net.IPNet{IP: addr.Addr().AsSlice(), Mask: net.CIDRMask(32, 32)}, Gw: via.AsSlice()}
			if err := nl.RouteReplace(route); err != nil {
				return fmt.Errorf("when routing %s through %s: %w", addr.Addr(), via, err)
			}
			defer nl.RouteDel(route)
		}
		c, err := net.DialTimeout("tcp", addr.String(), 5*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.WriteString(c, "GET / HTTP/1.0\r\n\r\n"); err != nil {
			return err
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, err = io.ReadAll(resp.Body)
		return err
	})
	return strings.TrimSpace(string(body)), err
}
