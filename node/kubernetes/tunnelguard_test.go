package kubernetes

import (
	"encoding/binary"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"cairn.dev/cairn/pkg/netnstest"
)

// TestTunnelGuardInTheKernel puts the guard into a pod network of
// network namespaces: "outside" stands for a machine of the nodes'
// network, a decommissioned node say (behind eth0), which routes the pod
// range through the node; "own" for one of the node's pods (behind a
// veth); "far" for another node's pod, reached through the tunnel
// (behind a link named as it). Before the guard, outside reaches own in
// plaintext; with it, outside reaches no pod address, not even relayed
// into the tunnel, while the tunnel, the node's own pods, their answers
// and a NodePort still work. An invalid packet is dropped too. The table
// goes with the last unit.
func TestTunnelGuardInTheKernel(t *testing.T) {
	node, pods := policyNetwork(t, "eth0", "veth-b", tunnelDevice)
	outside, own, far := pods["a"], pods["b"], pods["c"]
	names := map[policyTestPod]string{outside: "outside", own: "own", far: "far"}
	// own's and far's addresses (10.2.0.2, 10.3.0.2) stand for the pod
	// range's; outside's (10.1.0.2) is not in it.
	podRange := netip.MustParsePrefix("10.2.0.0/15")
	nf, err := nftables.New(nftables.WithNetNSFd(int(node)))
	if err != nil {
		t.Fatal(err)
	}
	// kube-proxy's stand-in: a NodePort on the node's address on
	// outside's side, to own.
	nodePort := netip.AddrPortFrom(netip.MustParseAddr("10.1.0.1"), 30080)
	addNodePort(t, nf, nodePort, netip.AddrPortFrom(own.ip, 8080))

	type conn struct {
		from, to policyTestPod
		want     bool
	}
	check := func(when string, conns []conn) {
		t.Helper()
		for _, cn := range conns {
			err := dialWant(cn.from, netip.AddrPortFrom(cn.to.ip, 8080), cn.to, cn.want)
			if got := err == nil; got != cn.want {
				t.Errorf("%s: %s → %s: connected %t (%v), want %t", when, names[cn.from], names[cn.to], got, err, cn.want)
			}
		}
		if err := dialWant(outside, nodePort, own, true); err != nil {
			t.Errorf("%s: outside → the NodePort %s: %v", when, nodePort, err)
		}
	}
	open := []conn{{outside, own, true}, {outside, far, true}, {far, own, true}, {own, far, true}, {own, outside, true}, {far, outside, true}}
	check("before the guard", open)

	if err := guardPods(nf, podRange); err != nil {
		t.Fatal(err)
	}
	check("with the guard", []conn{
		{outside, own, false}, // plaintext to a pod
		{outside, far, false}, // nor relayed into the tunnel
		{far, own, true},      // through the tunnel
		{own, far, true},      // into the tunnel
		{own, outside, true},  // a pod's own connection, answers included
		{far, outside, true},
	})
	// Programming again replaces, and does not add to, what was there.
	if err := guardPods(nf, podRange); err != nil {
		t.Fatal(err)
	}
	if n := len(guardRules(t, nf)); n != 2 {
		t.Errorf("%d rules in the guard after programming it twice, want 2", n)
	}
	check("programmed again", []conn{{outside, own, false}, {far, own, true}})

	// A TCP segment conntrack finds invalid (SYN and FIN at once, no
	// checksum), for which it keeps no connection, from outside to own.
	err = netnstest.Do(outside.ns, func() error {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_TCP)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		seg := make([]byte, 20)
		binary.BigEndian.PutUint16(seg[0:], 40000)
		binary.BigEndian.PutUint16(seg[2:], 8080)
		seg[12] = 5 << 4      // header length: 5 words
		seg[13] = 0x01 | 0x02 // FIN, SYN
		binary.BigEndian.PutUint16(seg[14:], 1024)
		return unix.Sendto(fd, seg, 0, &unix.SockaddrInet4{Addr: own.ip.As4()})
	})
	if err != nil {
		t.Fatalf("sending an invalid segment: %v", err)
	}
	rules := guardRules(t, nf)
	if len(rules) != 2 || counted(rules[0]) == 0 || counted(rules[1]) == 0 {
		t.Errorf("the guard's rules dropped %d and %d packets, want some of each (plaintext, invalid)", counted(rules[0]), counted(rules[1]))
	}

	r := &Routing{nfOpts: []nftables.ConnOption{nftables.WithNetNSFd(int(node))},
		nlOpen: func() (*netlink.Handle, error) { return netlink.NewHandleAt(node) }}
	removed, err := r.remove()
	if err != nil || !strings.Contains(removed, "ip "+guardTable) {
		t.Errorf("remove() = %q, %v; want the guard's table removed", removed, err)
	}
	// The tunnel (far's link here) went with it.
	check("after the guard was removed", []conn{{outside, own, true}})
}

// addNodePort adds to nf a table that translates TCP to from to to, as
// kube-proxy does a NodePort's.
func addNodePort(t *testing.T, nf *nftables.Conn, from, to netip.AddrPort) {
	t.Helper()
	table := nf.AddTable(&nftables.Table{Family: nftables.TableFamilyIPv4, Name: "nodeport"})
	chain := nf.AddChain(&nftables.Chain{Name: "prerouting", Table: table, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityNATDest})
	port := func(p uint16) []byte { return binary.BigEndian.AppendUint16(nil, p) }
	nf.AddRule(&nftables.Rule{Table: table, Chain: chain, Exprs: []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: from.Addr().AsSlice()},
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_TCP}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: port(from.Port())},
		&expr.Immediate{Register: 1, Data: to.Addr().AsSlice()},
		&expr.Immediate{Register: 2, Data: port(to.Port())},
		&expr.NAT{Type: expr.NATTypeDestNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: 1, RegProtoMin: 2, Specified: true},
	}})
	if err := nf.Flush(); err != nil {
		t.Fatalf("adding the NodePort: %v", err)
	}
}

// guardRules lists the rules of the guard's chain.
func guardRules(t *testing.T, nf *nftables.Conn) []*nftables.Rule {
	t.Helper()
	rules, err := nf.GetRules(&nftables.Table{Family: nftables.TableFamilyIPv4, Name: guardTable}, &nftables.Chain{Name: "forward"})
	if err != nil {
		t.Fatalf("listing the guard's rules: %v", err)
	}
	return rules
}

// counted is the packets r's counter counted.
func counted(r *nftables.Rule) uint64 {
	for _, e := range r.Exprs {
		if c, ok := e.(*expr.Counter); ok {
			return c.Packets
		}
	}
	return 0
}
