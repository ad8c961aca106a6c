package kubernetes

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"cairn.dev/cairn/pkg/netnstest"
)

// policyTestPod is a pod of policyNetwork: its namespace and address.
type policyTestPod struct {
	ns netns.NsHandle
	ip netip.Addr
}

// policyNetwork is a node's pod network in network namespaces of its
// own: a node namespace that routes between pods a, b and c, each in a
// namespace behind a veth pair whose node end is named veth-a, veth-b
// and veth-c, or links when given, and each serving TCP on 8080 and 9090
// (answering its own address). It returns the node's namespace.
func policyNetwork(t *testing.T, links ...string) (netns.NsHandle, map[string]policyTestPod) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root for network namespaces")
	}
	node := netnstest.New(t)
	nl, err := netlink.NewHandleAt(node)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nl.Close)
	err = netnstest.Do(node, func() error {
		return os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0)
	})
	if err != nil {
		t.Fatal(err)
	}
	pods := map[string]policyTestPod{}
	for i, name := range []string{"a", "b", "c"} {
		pod := policyTestPod{ns: netnstest.New(t), ip: netip.AddrFrom4([4]byte{10, byte(i + 1), 0, 2})}
		pods[name] = pod
		gw := netip.AddrFrom4([4]byte{10, byte(i + 1), 0, 1})
		link := "veth-" + name
		if len(links) > 0 {
			link = links[i]
		}
		veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: link}, PeerName: "eth0", PeerNamespace: netlink.NsFd(pod.ns)}
		if err := nl.LinkAdd(veth); err != nil {
			t.Fatal(err)
		}
		setLink(t, nl, link, gw)
		pl, err := netlink.NewHandleAt(pod.ns)
		if err != nil {
			t.Fatal(err)
		}
		setLink(t, pl, "eth0", pod.ip)
		lo, _ := pl.LinkByName("lo")
		if err := pl.LinkSetUp(lo); err != nil {
			t.Fatal(err)
		}
		if err := pl.RouteAdd(&netlink.Route{Dst: &net.IPNet{IP: net.IPv4zero, Mask: net.CIDRMask(0, 32)}, Gw: gw.AsSlice()}); err != nil {
			t.Fatal(err)
		}
		pl.Close()
		for _, port := range []int{8080, 9090} {
			var ln net.Listener
			err := netnstest.Do(pod.ns, func() error {
				var err error
				ln, err = net.Listen("tcp", fmt.Sprintf(":%d", port))
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { ln.Close() })
			go func() {
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					io.WriteString(c, pod.ip.String())
					c.Close()
				}
			}()
		}
	}
	return node, pods
}

// setLink gives link name of nl address a (in a /24) and brings it up.
func setLink(t *testing.T, nl *netlink.Handle, name string, a netip.Addr) {
	t.Helper()
	link, err := nl.LinkByName(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := nl.AddrAdd(link, &netlink.Addr{IPNet: &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(24, 32)}}); err != nil {
		t.Fatal(err)
	}
	if err := nl.LinkSetUp(link); err != nil {
		t.Fatal(err)
	}
}

// dialWant dials as dialAddr does, wanting the connection open or not. One
// that should open gets three more tries: on a loaded machine (the race
// detector beside virtual machines) a first connection may take longer
// than a dial's half second. One that should not is tried once, since a
// dropped connection only ever times out.
func dialWant(from policyTestPod, addr netip.AddrPort, to policyTestPod, want bool) error {
	err := dialAddr(from, addr, to)
	for i := 0; want && err != nil && i < 3; i++ {
		err = dialAddr(from, addr, to)
	}
	return err
}

// dialAddr connects from pod from to addr and checks that pod to answers.
func dialAddr(from policyTestPod, addr netip.AddrPort, to policyTestPod) error {
	return netnstest.Do(from.ns, func() error {
		c, err := net.DialTimeout("tcp", addr.String(), 500*time.Millisecond)
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(2 * time.Second))
		b, err := io.ReadAll(c)
		if err != nil {
			return err
		}
		if string(b) != to.ip.String() {
			return fmt.Errorf("answered %q, want %s", b, to.ip)
		}
		return nil
	})
}

// TestPoliciesInTheKernel programs rules into a pod network of network
// namespaces and connects between its pods: what the rules allow
// connects, answers included, and nothing else does; programming no
// rules opens everything again.
func TestPoliciesInTheKernel(t *testing.T) {
	node, pods := policyNetwork(t)
	a, b, c := pods["a"], pods["b"], pods["c"]
	nf, err := nftables.New(nftables.WithNetNSFd(int(node)))
	if err != nil {
		t.Fatal(err)
	}
	type conn struct {
		from, to string
		port     int
		want     bool
	}
	check := func(when string, conns []conn) {
		t.Helper()
		for _, cn := range conns {
			err := dialWant(pods[cn.from], netip.AddrPortFrom(pods[cn.to].ip, uint16(cn.port)), pods[cn.to], cn.want)
			if got := err == nil; got != cn.want {
				t.Errorf("%s: %s → %s:%d: connected %t (%v), want %t", when, cn.from, cn.to, cn.port, got, err, cn.want)
			}
		}
	}
	open := []conn{{"a", "b", 8080, true}, {"c", "b", 8080, true}, {"b", "a", 9090, true}, {"a", "c", 9090, true}}
	check("before any policy", open)

	rules := []podPolicy{
		// b takes only a, on 8080; and sends nothing of its own.
		{Pod: "shop/b", IP: b.ip,
			Ingress: []allow{{Peers: []ipRange{{a.ip, a.ip}}, Ports: []portRange{tcp(8000, 8080)}}},
			Egress:  []allow{}},
		// a may send to 10.0.0.0/8 except c's /24, and to c on 9090.
		{Pod: "shop/a", IP: a.ip, Egress: []allow{
			{Peers: ipBlockRanges("10.0.0.0/8", []string{"10.3.0.0/24"})},
			{Peers: []ipRange{{c.ip, c.ip}}, Ports: []portRange{tcp(9090, 9090)}},
		}},
	}
	if err := setPolicies(nf, rules); err != nil {
		t.Fatal(err)
	}
	check("with policies", []conn{
		{"a", "b", 8080, true},  // allowed both ways, the answer by conntrack
		{"a", "b", 9090, false}, // b's port not allowed
		{"c", "b", 8080, false}, // c not allowed into b
		{"b", "a", 9090, false}, // b's egress isolated
		{"a", "c", 9090, true},  // a's second rule
		{"a", "c", 8080, false}, // c's /24 excepted from the first
		{"c", "a", 8080, true},  // a's ingress is not isolated
	})
	// Programming again replaces, and does not add to, what was there.
	if err := setPolicies(nf, rules[1:]); err != nil {
		t.Fatal(err)
	}
	check("with a's policy alone", []conn{{"c", "b", 8080, true}, {"b", "a", 9090, true}, {"a", "c", 8080, false}})
	if err := setPolicies(nf, nil); err != nil {
		t.Fatal(err)
	}
	check("with no policy", open)

	// The whole table goes with the last unit (Routing.remove).
	r := &Routing{nfOpts: []nftables.ConnOption{nftables.WithNetNSFd(int(node))},
		nlOpen: func() (*netlink.Handle, error) { return netlink.NewHandleAt(node) }}
	if err := setPolicies(nf, rules); err != nil {
		t.Fatal(err)
	}
	removed, err := r.remove()
	if err != nil || !strings.Contains(removed, "ip "+policyTable) {
		t.Errorf("remove() = %q, %v; want the policy table removed", removed, err)
	}
	if _, err := nf.ListTableOfFamily(policyTable, nftables.TableFamilyIPv4); !errors.Is(err, os.ErrNotExist) && err == nil {
		t.Errorf("the policy table is there after remove()")
	}
	check("after the table was removed", open)
}
