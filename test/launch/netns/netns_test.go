package netns

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/insomniacslk/dhcp/dhcpv4/nclient4"
	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"
	"golang.org/x/net/dns/dnsmessage"
	"golang.org/x/sys/unix"

	"cairn.dev/cairn/pkg/sntp"
)

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces")
	}
}

// simNode stands in for qemu on a tap: a network namespace of its own,
// joined to the bridge by a veth pair whose inner end is eth0.
type simNode struct {
	ns     vnetns.NsHandle
	handle *netlink.Handle
	eth0   netlink.Link
}

func newSimNode(t *testing.T, n *Network, outer string, mac net.HardwareAddr) *simNode {
	t.Helper()
	var ns vnetns.NsHandle
	err := onLockedThread(func() error {
		var err error
		ns, err = vnetns.New()
		return err
	})
	if err != nil {
		t.Fatalf("creating node namespace: %v", err)
	}
	t.Cleanup(func() { ns.Close() })
	br, err := n.handle.LinkByName(BridgeName)
	if err != nil {
		t.Fatalf("finding bridge: %v", err)
	}
	veth := &netlink.Veth{
		LinkAttrs:        netlink.LinkAttrs{Name: outer, MasterIndex: br.Attrs().Index},
		PeerName:         "eth0",
		PeerHardwareAddr: mac,
		PeerNamespace:    netlink.NsFd(ns),
	}
	if err := n.handle.LinkAdd(veth); err != nil {
		t.Fatalf("adding veth %s: %v", outer, err)
	}
	if err := n.handle.LinkSetUp(veth); err != nil {
		t.Fatalf("bringing up %s: %v", outer, err)
	}
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatalf("netlink in node namespace: %v", err)
	}
	t.Cleanup(h.Close)
	s := &simNode{ns: ns, handle: h}
	for _, name := range []string{"lo", "eth0"} {
		l, err := h.LinkByName(name)
		if err != nil {
			t.Fatalf("finding %s in node namespace: %v", name, err)
		}
		if err := h.LinkSetUp(l); err != nil {
			t.Fatalf("bringing up %s in node namespace: %v", name, err)
		}
		s.eth0 = l
	}
	return s
}

// lease runs a DHCP client exchange on eth0 inside the node's namespace.
func (s *simNode) lease(ctx context.Context, f func(*nclient4.Client) (*nclient4.Lease, error)) (*nclient4.Lease, error) {
	var lease *nclient4.Lease
	err := doIn(s.ns, func() error {
		c, err := nclient4.New("eth0", nclient4.WithTimeout(time.Second), nclient4.WithRetry(3))
		if err != nil {
			return err
		}
		defer c.Close()
		lease, err = f(c)
		return err
	})
	return lease, err
}

func (s *simNode) setAddr(t *testing.T, ip netip.Addr) {
	t.Helper()
	addr := &netlink.Addr{IPNet: &net.IPNet{IP: ip.AsSlice(), Mask: net.CIDRMask(Prefix.Bits(), 32)}}
	if err := s.handle.AddrAdd(s.eth0, addr); err != nil {
		t.Fatalf("addressing node with %s: %v", ip, err)
	}
}

// echo listens on addr inside the node's namespace and echoes every
// connection until the test ends.
func (s *simNode) echo(t *testing.T, addr string) {
	t.Helper()
	var ln net.Listener
	err := doIn(s.ns, func() error {
		var err error
		ln, err = net.Listen("tcp", addr)
		return err
	})
	if err != nil {
		t.Fatalf("listening in node namespace: %v", err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { ln.Close(); <-done })
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.Copy(c, c)
			}()
		}
	}()
}

// exchange writes msg to c, half-closes it and reads the answer to its end.
func exchange(c net.Conn, msg string) (string, error) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, msg); err != nil {
		return "", err
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		return "", err
	}
	b, err := io.ReadAll(c)
	return string(b), err
}

func namespaces(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir(netnsDir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("listing namespaces: %v", err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func hostLinks(t *testing.T) []string {
	t.Helper()
	links, err := netlink.LinkList()
	if err != nil {
		t.Fatalf("listing host links: %v", err)
	}
	var names []string
	for _, l := range links {
		names = append(names, l.Attrs().Name)
	}
	slices.Sort(names)
	return names
}

func TestNetwork(t *testing.T) {
	needRoot(t)
	nsBefore, linksBefore := namespaces(t), hostLinks(t)

	n, err := New(Config{Nodes: 2, LeaseTime: 20 * time.Second, Logf: t.Logf})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { n.Close() })
	if !slices.Contains(namespaces(t), n.Name()) {
		t.Fatalf("namespace %s not in %s", n.Name(), netnsDir)
	}
	nodes := []*simNode{
		newSimNode(t, n, "veth0", n.Node(0).MAC),
		newSimNode(t, n, "veth1", n.Node(1).MAC),
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	// Each node asks for a lease, as a node does at boot, and takes it.
	for i, s := range nodes {
		lease, err := s.lease(ctx, func(c *nclient4.Client) (*nclient4.Lease, error) {
			return c.Request(ctx)
		})
		if err != nil {
			t.Fatalf("node %d: DHCP exchange: %v", i, err)
		}
		want := leaseView{
			Type: "ACK", YourIP: n.Node(i).IP.String(), Mask: "255.255.255.0",
			Router: []string{"10.42.0.1"}, Server: "10.42.0.1", NTP: []string{"10.42.0.1"},
			LeaseTime: 20 * time.Second, Renew: 10 * time.Second,
		}
		if diff := cmp.Diff(want, viewOf(lease.ACK)); diff != "" {
			t.Fatalf("node %d lease (-want +got):\n%s", i, diff)
		}
		s.setAddr(t, n.Node(i).IP)
		s.echo(t, netip.AddrPortFrom(n.Node(i).IP, 7).String())
	}

	t.Run("renewal keeps the address", func(t *testing.T) {
		lease, err := nodes[1].lease(ctx, func(c *nclient4.Client) (*nclient4.Lease, error) {
			first, err := c.Request(ctx)
			if err != nil {
				return nil, err
			}
			return c.Renew(ctx, first)
		})
		if err != nil {
			t.Fatalf("renewal: %v", err)
		}
		if got, want := lease.ACK.YourIPAddr.String(), n.Node(1).IP.String(); got != want {
			t.Errorf("renewed address = %q, want %q", got, want)
		}
		// One ACK at boot, one for the new request, one for the renewal.
		acks, err := n.WaitAcks(ctx, 1, 3)
		if err != nil {
			t.Fatalf("WaitAcks: %v", err)
		}
		var got []string
		for _, a := range acks {
			got = append(got, fmt.Sprintf("%s renewal=%t", a.IP, a.Renewal))
		}
		want := []string{
			"10.42.0.11 renewal=false",
			"10.42.0.11 renewal=false",
			"10.42.0.11 renewal=true",
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("Acks(1) (-want +got):\n%s", diff)
		}
		if got := len(n.Acks(0)); got != 1 {
			t.Errorf("len(Acks(0)) = %d, want 1", got)
		}
	})

	t.Run("no lease for an unknown MAC", func(t *testing.T) {
		stranger := newSimNode(t, n, "veth9", net.HardwareAddr{0x52, 0x54, 0x00, 0x99, 0x99, 0x99})
		var offer error
		err := doIn(stranger.ns, func() error {
			c, err := nclient4.New("eth0", nclient4.WithTimeout(300*time.Millisecond), nclient4.WithRetry(1))
			if err != nil {
				return err
			}
			defer c.Close()
			_, offer = c.DiscoverOffer(ctx)
			return nil
		})
		if err != nil {
			t.Fatalf("DHCP client: %v", err)
		}
		if offer == nil {
			t.Errorf("DiscoverOffer from an unknown MAC got an offer, want none")
		}
	})

	t.Run("forward from the host", func(t *testing.T) {
		for i := range nodes {
			addr, err := n.Forward(n.Node(i).IP, 7)
			if err != nil {
				t.Fatalf("Forward(%s, 7): %v", n.Node(i).IP, err)
			}
			if ap := netip.MustParseAddrPort(addr); !ap.Addr().IsLoopback() {
				t.Errorf("Forward(%s, 7) = %q, want a loopback address", n.Node(i).IP, addr)
			}
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatalf("dialing forward %s: %v", addr, err)
			}
			msg := strings.Repeat("cairn ", 10000)
			if got, err := exchange(c, msg); err != nil || got != msg {
				t.Errorf("echo through %s: got %d bytes, %v; want %d bytes", addr, len(got), err, len(msg))
			}
		}
	})

	t.Run("forward to a closed port", func(t *testing.T) {
		addr, err := n.Forward(n.Node(0).IP, 9)
		if err != nil {
			t.Fatalf("Forward(%s, 9): %v", n.Node(0).IP, err)
		}
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("dialing forward %s: %v", addr, err)
		}
		if got, err := exchange(c, "hello"); got != "" {
			t.Errorf("through forward to a closed port: got %q, %v; want nothing", got, err)
		}
	})

	t.Run("the host's time", func(t *testing.T) {
		// Node 0 asks the NTP server its lease names, as a node does.
		var r *sntp.Response
		err := doIn(nodes[0].ns, func() error {
			var err error
			r, err = sntp.Query(ctx, netip.AddrPortFrom(BridgeAddr, sntp.Port))
			return err
		})
		if err != nil {
			t.Fatalf("SNTP query from node 0: %v", err)
		}
		// Both ends read this machine's clock.
		if r.Offset.Abs() > r.Delay/2+time.Millisecond || r.Stratum != 1 {
			t.Errorf("SNTP answer: offset %s, round trip %s, stratum %d; want no offset, stratum 1", r.Offset, r.Delay, r.Stratum)
		}
	})

	t.Run("nodes reach each other", func(t *testing.T) {
		var got string
		err := doIn(nodes[1].ns, func() error {
			c, err := net.DialTimeout("tcp", netip.AddrPortFrom(n.Node(0).IP, 7).String(), 5*time.Second)
			if err != nil {
				return err
			}
			got, err = exchange(c, "from node 1")
			return err
		})
		if err != nil || got != "from node 1" {
			t.Errorf("node 1 to node 0 echo = %q, %v; want %q", got, err, "from node 1")
		}
	})

	t.Run("no way out", func(t *testing.T) {
		routes, err := n.handle.RouteList(nil, netlink.FAMILY_ALL)
		if err != nil {
			t.Fatalf("listing routes: %v", err)
		}
		for _, r := range routes {
			if r.Dst == nil || r.Dst.IP.IsUnspecified() {
				t.Errorf("namespace has a default route: %v", r)
			}
		}
		err = n.Do(func() error {
			c, err := net.DialTimeout("tcp", "192.0.2.1:80", 2*time.Second)
			if err == nil {
				c.Close()
			}
			return err
		})
		if !errors.Is(err, syscall.ENETUNREACH) {
			t.Errorf("dialing 192.0.2.1:80 from the namespace: %v, want %v", err, syscall.ENETUNREACH)
		}
	})

	t.Run("qemu can attach to the taps", func(t *testing.T) {
		for _, node := range n.Nodes() {
			err := n.Do(func() error { return attachTap(node.Tap) })
			if err != nil {
				t.Errorf("attaching to %s the way qemu does: %v", node.Tap, err)
			}
		}
	})

	t.Run("commands run inside", func(t *testing.T) {
		out, err := n.Cmd("cat", "/proc/net/dev").Output()
		if err != nil {
			t.Fatalf("Cmd(cat /proc/net/dev): %v", err)
		}
		for _, link := range []string{BridgeName, "tap0", "tap1"} {
			if !strings.Contains(string(out), link+":") {
				t.Errorf("Cmd(cat /proc/net/dev) = %q, want %s in it", out, link)
			}
		}
		err = n.Do(func() error {
			out, err = exec.Command("cat", "/proc/net/dev").Output()
			return err
		})
		if err != nil || !strings.Contains(string(out), BridgeName+":") {
			t.Errorf("cat /proc/net/dev started in Do = %q, %v; want %s in it", out, err, BridgeName)
		}
	})

	if err := n.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := n.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if diff := cmp.Diff(nsBefore, namespaces(t)); diff != "" {
		t.Errorf("namespaces after Close (-before +after):\n%s", diff)
	}
	if diff := cmp.Diff(linksBefore, hostLinks(t)); diff != "" {
		t.Errorf("host links after Close (-before +after):\n%s", diff)
	}
	if _, err := n.Forward(n.Node(0).IP, 7); err == nil {
		t.Errorf("Forward after Close succeeded, want an error")
	}
}

func TestDoRaisesPanic(t *testing.T) {
	needRoot(t)
	n := NewForTest(t, Config{Nodes: 1})
	defer func() {
		if r := recover(); r != "boom" {
			t.Errorf("recover() = %v, want %q", r, "boom")
		}
	}()
	n.Do(func() error { panic("boom") })
}

// attachTap opens the tap called name the way qemu does, with the flags
// qemu asks for, and closes it again.
func attachTap(name string) error {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return err
	}
	ifr.SetUint16(unix.IFF_TAP | unix.IFF_NO_PI | unix.IFF_VNET_HDR)
	return unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr)
}

func TestNewSweepsStaleNamespaces(t *testing.T) {
	needRoot(t)
	// A process that has exited and been reaped stands for a killed test.
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatalf("running true: %v", err)
	}
	stale := fmt.Sprintf("%s%d-0badf00d", namePrefix, dead.Process.Pid)
	live := fmt.Sprintf("%s%d-0badf00d", namePrefix, os.Getpid())
	for _, name := range []string{stale, live} {
		err := onLockedThread(func() error {
			ns, err := vnetns.NewNamed(name)
			if err == nil {
				ns.Close()
			}
			return err
		})
		if err != nil {
			t.Fatalf("creating namespace %s: %v", name, err)
		}
		t.Cleanup(func() { vnetns.DeleteNamed(name) })
	}
	NewForTest(t, Config{Nodes: 1})
	names := namespaces(t)
	if slices.Contains(names, stale) {
		t.Errorf("namespace %s of a dead process is still there after New", stale)
	}
	if !slices.Contains(names, live) {
		t.Errorf("namespace %s of a live process was removed by New", live)
	}
}

// TestDoStrandsNoThread runs Do on two networks from many goroutines at
// once, then checks every thread Go hands out: none may be left inside a
// network's namespace. (Returning to the main thread's namespace instead
// of the thread's own once stranded threads whenever the main thread was
// itself inside Do.)
func TestDoStrandsNoThread(t *testing.T) {
	needRoot(t)
	host, err := vnetns.GetFromPath("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	nets := []*Network{NewForTest(t, Config{Nodes: 1}), NewForTest(t, Config{Nodes: 1})}
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for range 100 {
				if err := nets[g%2].Do(func() error { runtime.Gosched(); return nil }); err != nil {
					t.Errorf("Do: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	for range 200 {
		wg.Go(func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			ns, err := vnetns.Get()
			if err != nil {
				t.Errorf("vnetns.Get: %v", err)
				return
			}
			defer ns.Close()
			if !ns.Equal(host) {
				t.Errorf("thread %d is left in namespace %s", syscall.Gettid(), ns)
			}
		})
	}
	wg.Wait()
}

// TestNames asks the harness's DNS server, from inside the namespace as
// a node does, for a name it was given and for one it was not.
func TestNames(t *testing.T) {
	needRoot(t)
	n := NewForTest(t, Config{Nodes: 1, Names: map[string]netip.Addr{"registry.cairn.test": BridgeAddr}, Logf: t.Logf})
	for _, c := range []struct {
		name  string
		rcode dnsmessage.RCode
		want  int
	}{
		{"Registry.Cairn.Test.", dnsmessage.RCodeSuccess, 1},
		{"other.cairn.test.", dnsmessage.RCodeNameError, 0},
	} {
		var conn net.Conn
		if err := n.Do(func() (err error) {
			conn, err = net.Dial("udp", netip.AddrPortFrom(BridgeAddr, 53).String())
			return err
		}); err != nil {
			t.Fatal(err)
		}
		q, _ := (&dnsmessage.Message{
			Header:    dnsmessage.Header{ID: 7, RecursionDesired: true},
			Questions: []dnsmessage.Question{{Name: dnsmessage.MustNewName(c.name), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET}},
		}).Pack()
		conn.SetDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 512)
		_, err := conn.Write(q)
		var nr int
		if err == nil {
			nr, err = conn.Read(buf)
		}
		conn.Close()
		var m dnsmessage.Message
		if err == nil {
			err = m.Unpack(buf[:nr])
		}
		if err != nil || m.RCode != c.rcode || len(m.Answers) != c.want {
			t.Errorf("%s: %v with %d answers (%v), want %v with %d", c.name, m.RCode, len(m.Answers), err, c.rcode, c.want)
			continue
		}
		if c.want == 1 {
			if a, ok := m.Answers[0].Body.(*dnsmessage.AResource); !ok || netip.AddrFrom4(a.A) != BridgeAddr {
				t.Errorf("%s = %v, want %s", c.name, m.Answers[0].Body, BridgeAddr)
			}
		}
	}
}
