package kubernetes

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// podRouteProtocol marks the routes Cairn programs to other nodes' pod
// ranges (the routing protocol field of each route), so that it finds and
// removes its own stale routes, even after a restart, and no others.
const podRouteProtocol = netlink.RouteProtocol(0xca)

// A podRange is a node's pod range and the address it is reached at.
type podRange struct {
	Node    string
	Range   netip.Prefix
	Address netip.Addr
	// Ready is the Node's Ready condition.
	Ready bool
}

// syncPodRoutes makes the routes of nl to other nodes' pod ranges those of
// ranges: each range through its node's address, except this node's own
// (self), which the CNI plugin routes to the pods' veths. Routes Cairn
// programmed earlier for ranges no longer listed are removed.
func syncPodRoutes(nl *netlink.Handle, self string, ranges []podRange) error {
	want := map[netip.Prefix]netip.Addr{}
	for _, r := range ranges {
		if r.Node == self || !r.Range.IsValid() || !r.Address.IsValid() {
			continue
		}
		want[r.Range.Masked()] = r.Address
	}
	have, err := listPodRoutes(nl)
	if err != nil {
		return err
	}
	var errs []error
	for _, rt := range have {
		dst, ok := prefixOf(rt.Dst)
		if gw, wanted := want[dst]; ok && wanted && net.IP(gw.AsSlice()).Equal(rt.Gw) {
			delete(want, dst)
			continue
		}
		if err := nl.RouteDel(&rt); err != nil && !errors.Is(err, unix.ESRCH) {
			errs = append(errs, fmt.Errorf("when removing the stale pod route to %s: %w", rt.Dst, err))
		}
	}
	for dst, gw := range want {
		rt := &netlink.Route{
			Dst:      &net.IPNet{IP: dst.Addr().AsSlice(), Mask: net.CIDRMask(dst.Bits(), 32)},
			Gw:       gw.AsSlice(),
			Protocol: podRouteProtocol,
		}
		if err := nl.RouteReplace(rt); err != nil {
			errs = append(errs, fmt.Errorf("when routing pod range %s through %s: %w", dst, gw, err))
		}
	}
	return errors.Join(errs...)
}

// listPodRoutes lists the routes Cairn programmed to other nodes' pod
// ranges.
func listPodRoutes(nl *netlink.Handle) ([]netlink.Route, error) {
	rs, err := nl.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Protocol: podRouteProtocol, Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_PROTOCOL|netlink.RT_FILTER_TABLE)
	if err != nil {
		return nil, fmt.Errorf("when listing pod routes: %w", err)
	}
	return rs, nil
}

// prefixOf converts a route destination.
func prefixOf(n *net.IPNet) (netip.Prefix, bool) {
	if n == nil {
		return netip.Prefix{}, false
	}
	a, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	ones, _ := n.Mask.Size()
	return netip.PrefixFrom(a.Unmap(), ones), true
}
