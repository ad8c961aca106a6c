package kubernetes

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// guardTable is the nftables table (family ip) that keeps plaintext out
// of the pod network; Cairn owns it whole.
const guardTable = "cairn-tunnel"

// podLinkPrefix starts the name of every pod's veth on the node's side:
// the CNI plugin Cairn configures (ptp) names them veth and a random hex.
const podLinkPrefix = "veth"

// ctStatusDstNAT is the bit of a connection's conntrack status that says
// its destination was translated (the kernel's IPS_DST_NAT).
const ctStatusDstNAT = 1 << 5

// guardPods makes nf's guard table drop what the node would forward to a
// pod address of podRange from anywhere but the pod tunnel or its own
// pods. Without it, a machine of the nodes' network, a decommissioned
// node among them, reached a worker's pods in plaintext by routing their
// range through the worker's address: WireGuard refuses what is not
// sealed by a peer, but only what comes through the tunnel.
//
// What the node forwards to a pod after its own address translation
// (kube-proxy's NodePorts, whose first packet was addressed to the node)
// still goes through, and so do the answers to its pods' own
// connections: the rule drops only what travels in the direction of a
// connection that was opened to the pod address itself. A packet for
// which conntrack keeps no connection (one it found invalid) is dropped
// when it is addressed to a pod. The table is replaced in one netlink
// batch.
//
//	forward: iifname != cairn-wg, != veth*, ip daddr in podRange,
//	           ct direction original, ct status not dnat → drop
//	         iifname != cairn-wg, != veth*, ip daddr in podRange,
//	           ct state invalid                          → drop
func guardPods(nf *nftables.Conn, podRange netip.Prefix) error {
	if !podRange.Addr().Is4() {
		return fmt.Errorf("pod range %s is not IPv4", podRange)
	}
	table := emptyTable(nf, guardTable)
	accept := nftables.ChainPolicyAccept
	forward := nf.AddChain(&nftables.Chain{
		Name: "forward", Table: table, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter, Policy: &accept,
	})
	toPod := func(more ...expr.Any) []expr.Any {
		return append([]expr.Any{
			// iifname != "cairn-wg": the whole name, padded as the
			// kernel keeps it.
			&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
			&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: linkName(tunnelDevice)},
			// iifname != "veth*": its first bytes only.
			&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
			&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: []byte(podLinkPrefix)},
			// ip daddr & mask == podRange
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
			&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: net.CIDRMask(podRange.Bits(), 32), Xor: make([]byte, 4)},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: podRange.Masked().Addr().AsSlice()},
		}, append(more, &expr.Counter{}, &expr.Verdict{Kind: expr.VerdictDrop})...)
	}
	nf.AddRule(&nftables.Rule{Table: table, Chain: forward, Exprs: toPod(
		&expr.Ct{Register: 1, Key: expr.CtKeyDIRECTION},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{0}}, // IP_CT_DIR_ORIGINAL
		&expr.Ct{Register: 1, Key: expr.CtKeySTATUS},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: nativeUint32(ctStatusDstNAT), Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: make([]byte, 4)},
	)})
	nf.AddRule(&nftables.Rule{Table: table, Chain: forward, Exprs: toPod(
		&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: nativeUint32(expr.CtStateBitINVALID), Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: make([]byte, 4)},
	)})
	if err := nf.Flush(); err != nil {
		return fmt.Errorf("when programming the pod tunnel's guard (nftables table %s): %w", guardTable, err)
	}
	return nil
}

// linkName is name as the kernel compares an interface's: IFNAMSIZ
// bytes, padded with zeros.
func linkName(name string) []byte {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, name)
	return b
}
