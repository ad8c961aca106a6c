package netns

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/insomniacslk/dhcp/dhcpv4/nclient4"
	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"

	"cairn.dev/cairn/test/launch/l2switch"
)

// newSwitchedSimNode stands in for qemu on node i's switch port: a
// namespace of its own with a tap, eth0, that has the node's MAC address,
// and a relay that exchanges eth0's frames with the switch as UDP
// datagrams from the node's QEMUAddr, as qemu's -netdev dgram does.
func newSwitchedSimNode(t *testing.T, n *Network, i int) *simNode {
	t.Helper()
	node := n.Node(i)
	var ns vnetns.NsHandle
	var tap *os.File
	err := onLockedThread(func() error {
		var err error
		if ns, err = vnetns.New(); err != nil {
			return err
		}
		tap, err = openTap("eth0")
		return err
	})
	if err != nil {
		t.Fatalf("making node %d's namespace and tap: %v", i, err)
	}
	t.Cleanup(func() { ns.Close() })
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
		if name == "eth0" {
			if err := h.LinkSetHardwareAddr(l, node.MAC); err != nil {
				t.Fatalf("setting eth0's MAC address: %v", err)
			}
		}
		if err := h.LinkSetUp(l); err != nil {
			t.Fatalf("bringing up %s in node namespace: %v", name, err)
		}
		s.eth0 = l
	}

	var conn *net.UDPConn
	err = n.Do(func() error {
		var err error
		conn, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(node.QEMUAddr))
		return err
	})
	if err != nil {
		t.Fatalf("listening on node %d's QEMUAddr: %v", i, err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		buf := make([]byte, l2switch.MaxFrame)
		for {
			k, err := tap.Read(buf)
			if err != nil {
				return
			}
			conn.WriteToUDPAddrPort(buf[:k], node.SwitchAddr)
		}
	})
	wg.Go(func() {
		buf := make([]byte, l2switch.MaxFrame)
		for {
			k, err := conn.Read(buf)
			if err != nil {
				return
			}
			tap.Write(buf[:k])
		}
	})
	t.Cleanup(func() {
		tap.Close()
		conn.Close()
		wg.Wait()
	})
	return s
}

func TestSwitchedNetwork(t *testing.T) {
	needRoot(t)
	nsBefore, linksBefore := namespaces(t), hostLinks(t)
	profile := l2switch.Profile{Impairment: l2switch.Impairment{Delay: 2 * time.Millisecond, Jitter: time.Millisecond}, Seed: 1}
	n, err := New(Config{Nodes: 2, Switch: &profile, Logf: t.Logf})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { n.Close() })
	if n.Switch() == nil {
		t.Fatal("a network with Config.Switch has no switch")
	}
	for i, node := range n.Nodes() {
		got := strings.Join(node.QEMUArgs(), " ")
		want := fmt.Sprintf("-netdev dgram,id=net0,local.type=inet,local.host=127.0.0.1,local.port=%d,remote.type=inet,remote.host=127.0.0.1,remote.port=%d -device virtio-net-pci,netdev=net0,mac=%s",
			QEMUPortBase+i, node.SwitchAddr.Port(), node.MAC)
		if node.Tap != "" || got != want {
			t.Errorf("node %d: tap %q, QEMUArgs %q; want no tap and %q", i, node.Tap, got, want)
		}
	}
	nodes := []*simNode{newSwitchedSimNode(t, n, 0), newSwitchedSimNode(t, n, 1)}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	for i, s := range nodes {
		lease, err := s.lease(ctx, func(c *nclient4.Client) (*nclient4.Lease, error) {
			return c.Request(ctx)
		})
		if err != nil {
			t.Fatalf("node %d: DHCP exchange through the switch: %v", i, err)
		}
		if got, want := lease.ACK.YourIPAddr.String(), n.Node(i).IP.String(); got != want {
			t.Errorf("node %d leased %s, want %s", i, got, want)
		}
		s.setAddr(t, n.Node(i).IP)
		s.echo(t, netip.AddrPortFrom(n.Node(i).IP, 7).String())
	}

	// reaches says whether a connection from node 0's namespace (or the
	// host side's, for host) to node to's echo server works.
	reaches := func(host bool, to int) bool {
		t.Helper()
		do := func(f func() error) error { return doIn(nodes[0].ns, f) }
		if host {
			do = n.Do
		}
		msg := "hello node " + string(rune('0'+to))
		var got string
		err := do(func() error {
			c, err := net.DialTimeout("tcp", netip.AddrPortFrom(n.Node(to).IP, 7).String(), time.Second)
			if err != nil {
				return err
			}
			got, err = exchange(c, msg)
			return err
		})
		return err == nil && got == msg
	}

	t.Run("forward from the host", func(t *testing.T) {
		addr, err := n.Forward(n.Node(1).IP, 7)
		if err != nil {
			t.Fatalf("Forward: %v", err)
		}
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("dialing forward %s: %v", addr, err)
		}
		msg := strings.Repeat("cairn ", 50000)
		if got, err := exchange(c, msg); err != nil || got != msg {
			t.Errorf("echo through %s: got %d bytes, %v; want %d bytes", addr, len(got), err, len(msg))
		}
	})

	t.Run("partition and heal", func(t *testing.T) {
		if !reaches(false, 1) || !reaches(true, 1) {
			t.Fatal("node 1 is unreachable before the partition")
		}
		if err := n.Partition(1); err != nil {
			t.Fatalf("Partition(1): %v", err)
		}
		if reaches(false, 1) || reaches(true, 1) {
			t.Error("node 1 is reachable while cut off")
		}
		if !reaches(true, 0) {
			t.Error("node 0, on the other side, is unreachable from the host")
		}
		n.Heal()
		if !reaches(false, 1) || !reaches(true, 1) {
			t.Error("node 1 is unreachable after Heal")
		}
		if err := n.Partition(2); err == nil {
			t.Error("Partition(2) of a network of 2 nodes succeeded")
		}
		st := n.SwitchPort(1).Stats()
		if st.Cut == 0 || st.SentFrames == 0 {
			t.Errorf("node 1's port: %v; want frames sent and some cut", st)
		}
	})

	if err := n.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if diff := cmp.Diff(nsBefore, namespaces(t)); diff != "" {
		t.Errorf("namespaces after Close (-before +after):\n%s", diff)
	}
	if diff := cmp.Diff(linksBefore, hostLinks(t)); diff != "" {
		t.Errorf("host links after Close (-before +after):\n%s", diff)
	}
}

func TestPartitionNeedsTheSwitch(t *testing.T) {
	needRoot(t)
	n := NewForTest(t, Config{Nodes: 1})
	if n.Switch() != nil || n.SwitchPort(0) != nil {
		t.Error("a network without Config.Switch has a switch")
	}
	if err := n.Partition(0); err == nil {
		t.Error("Partition on the kernel's bridge succeeded")
	}
	n.Heal()
	if _, err := New(Config{Nodes: 1, Switch: &l2switch.Profile{Impairment: l2switch.Impairment{Loss: 3}}}); err == nil || !strings.Contains(err.Error(), "loss") {
		t.Errorf("New with a loss of 300%% = %v, want an error naming the loss", err)
	}
}
