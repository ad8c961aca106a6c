package kubernetes

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// masqueradeTable is the nftables table (family ip) that holds Cairn's
// masquerade of pod traffic; Cairn owns it whole.
const masqueradeTable = "cairn-pods"

// emptyTable queues, in nf's next batch, the IPv4 table name emptied of
// all it held, and returns it. Adding, then deleting, then adding again
// empties a table that exists and does not fail when it does not; the
// batch that fills it again replaces it whole.
func emptyTable(nf *nftables.Conn, name string) *nftables.Table {
	table := &nftables.Table{Family: nftables.TableFamilyIPv4, Name: name}
	nf.AddTable(table)
	nf.DelTable(table)
	nf.AddTable(table)
	return table
}

// setMasquerade makes nf's masquerade table say, and only say: traffic
// from pods (podRange) to anywhere outside podRange leaves with the
// node's address. Traffic between pods keeps its addresses, so pods see
// each other as they are; everything else (other nodes, the registry,
// the internet) answers the node, which routes the answer back to the
// pod. The table is replaced in one netlink batch, so there is no moment
// without the rule.
func setMasquerade(nf *nftables.Conn, podRange netip.Prefix) error {
	if !podRange.Addr().Is4() {
		return fmt.Errorf("pod range %s is not IPv4", podRange)
	}
	table := emptyTable(nf, masqueradeTable)
	chain := nf.AddChain(&nftables.Chain{
		Name:     "postrouting",
		Table:    table,
		Type:     nftables.ChainTypeNAT,
		Hooknum:  nftables.ChainHookPostrouting,
		Priority: nftables.ChainPriorityNATSource,
	})
	network := podRange.Masked().Addr().AsSlice()
	mask := net.CIDRMask(podRange.Bits(), 32)
	nf.AddRule(&nftables.Rule{Table: table, Chain: chain, Exprs: []expr.Any{
		// ip saddr & mask == network
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: mask, Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: network},
		// ip daddr & mask != network
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: mask, Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: network},
		&expr.Masq{},
	}})
	if err := nf.Flush(); err != nil {
		return fmt.Errorf("when programming the masquerade of pod traffic (nftables table %s): %w", masqueradeTable, err)
	}
	return nil
}

// removeTable deletes the IPv4 table name (the masquerade's, say), if
// there is one.
func removeTable(nf *nftables.Conn, name string) error {
	nf.DelTable(&nftables.Table{Family: nftables.TableFamilyIPv4, Name: name})
	if err := nf.Flush(); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("when removing nftables table ip %s: %w", name, err)
	}
	return nil
}
