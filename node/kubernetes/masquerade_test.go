package kubernetes

import (
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"cairn.dev/cairn/pkg/netnstest"
)

// TestMasquerade sends a pod's connection through a node whose
// masquerade is set to a host outside the pod range that has no route
// back to pods: it connects, and sees the node's address. Without the
// masquerade the same connection cannot complete.
func TestMasquerade(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for network namespaces")
	}
	pod, node, outside := netnstest.New(t), netnstest.New(t), netnstest.New(t)
	link := func(a netns.NsHandle, aName, aAddr string, b netns.NsHandle, bName, bAddr string) {
		t.Helper()
		nl, err := netlink.NewHandleAt(a)
		if err != nil {
			t.Fatal(err)
		}
		defer nl.Close()
		if err := nl.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: aName}, PeerName: bName, PeerNamespace: netlink.NsFd(b)}); err != nil {
			t.Fatal(err)
		}
		for _, side := range []struct {
			ns         netns.NsHandle
			name, addr string
		}{{a, aName, aAddr}, {b, bName, bAddr}} {
			h, err := netlink.NewHandleAt(side.ns)
			if err != nil {
				t.Fatal(err)
			}
			l, err := h.LinkByName(side.name)
			if err != nil {
				t.Fatal(err)
			}
			addr, _ := netlink.ParseAddr(side.addr)
			if err := h.AddrAdd(l, addr); err != nil {
				t.Fatal(err)
			}
			if err := h.LinkSetUp(l); err != nil {
				t.Fatal(err)
			}
			h.Close()
		}
	}
	link(pod, "eth0", "10.192.0.5/24", node, "vpod", "10.192.0.1/24")
	link(node, "eth0", "10.42.0.10/24", outside, "eth0", "10.42.0.1/24")
	nl, err := netlink.NewHandleAt(pod)
	if err != nil {
		t.Fatal(err)
	}
	defer nl.Close()
	if err := nl.RouteAdd(&netlink.Route{Dst: nil, Gw: net.ParseIP("10.192.0.1")}); err != nil {
		t.Fatal(err)
	}
	if err := netnstest.Do(node, func() error {
		return os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0)
	}); err != nil {
		t.Fatal(err)
	}

	var ln net.Listener
	if err := netnstest.Do(outside, func() error {
		ln, err = net.Listen("tcp", "10.42.0.1:0")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dial := func(timeout time.Duration) error {
		return netnstest.Do(pod, func() error {
			c, err := net.DialTimeout("tcp", ln.Addr().String(), timeout)
			if err == nil {
				c.Close()
			}
			return err
		})
	}

	if err := dial(time.Second); err == nil {
		t.Fatalf("a pod reached %s without masquerade: the test's outside host can route to pods", ln.Addr())
	}

	nf, err := nftables.New(nftables.WithNetNSFd(int(node)))
	if err != nil {
		t.Fatal(err)
	}
	// Twice: setting it again replaces the table, not adds to it.
	for range 2 {
		if err := setMasquerade(nf, netip.MustParsePrefix("10.192.0.0/11")); err != nil {
			t.Fatal(err)
		}
	}
	chains, err := nf.ListChains()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range chains {
		rules, err := nf.GetRules(c.Table, c)
		if err != nil {
			t.Fatal(err)
		}
		if c.Table.Name != masqueradeTable || len(rules) != 1 {
			t.Errorf("chain %s of table %s has %d rules, want only %s with one", c.Name, c.Table.Name, len(rules), masqueradeTable)
		}
	}

	accepted := make(chan net.Addr, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			accepted <- nil
			return
		}
		accepted <- c.RemoteAddr()
		c.Close()
	}()
	if err := dial(5 * time.Second); err != nil {
		t.Fatalf("a pod could not reach %s with the masquerade: %v", ln.Addr(), err)
	}
	if from := <-accepted; from == nil || from.(*net.TCPAddr).IP.String() != "10.42.0.10" {
		t.Errorf("the outside host saw the pod's connection come from %v, want the node's 10.42.0.10", from)
	}

	if err := removeTable(nf, masqueradeTable); err != nil {
		t.Fatal(err)
	}
	if err := removeTable(nf, masqueradeTable); err != nil {
		t.Fatalf("removing a removed masquerade: %v", err)
	}
	if tables, err := nf.ListTables(); err != nil || len(tables) != 0 {
		t.Errorf("tables after removeTable: %v, %v; want none", tables, err)
	}
}
