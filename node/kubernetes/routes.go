package kubernetes

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"

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
// programmed earlier for ranges no longer listed are removed. A
// controller that is no worker routes so; a worker sends every other
// node's pods' traffic through its tunnel instead (routeThroughTunnel).
func syncPodRoutes(nl *netlink.Handle, self string, ranges []podRange) error {
	var want []netlink.Route
	for _, r := range ranges {
		if r.Node == self || !r.Range.IsValid() || !r.Address.IsValid() {
			continue
		}
		want = append(want, netlink.Route{Dst: ipNet(r.Range), Gw: r.Address.AsSlice(), Protocol: podRouteProtocol})
	}
	return keepPodRoutes(nl, want)
}

// routeThroughTunnel makes the pod range's one route of Cairn's the one
// into the tunnel device link: the node's own pods have routes of their
// own to their veths, more specific, and WireGuard sends the rest to the
// peer whose range holds the address, or drops it.
func routeThroughTunnel(nl *netlink.Handle, link int) error {
	return keepPodRoutes(nl, []netlink.Route{{Dst: ipNet(podPrefix), LinkIndex: link, Protocol: podRouteProtocol}})
}

// keepPodRoutes makes Cairn's routes of nl (podRouteProtocol) want, and
// no others: it adds what is missing and removes what is not wanted.
func keepPodRoutes(nl *netlink.Handle, want []netlink.Route) error {
	have, err := listPodRoutes(nl)
	if err != nil {
		return err
	}
	var errs []error
	for _, rt := range have {
		i := slices.IndexFunc(want, func(w netlink.Route) bool {
			return w.Dst.String() == rt.Dst.String() && w.Gw.Equal(rt.Gw) && (w.LinkIndex == 0 || w.LinkIndex == rt.LinkIndex)
		})
		if i >= 0 {
			want = slices.Delete(want, i, i+1)
			continue
		}
		if err := nl.RouteDel(&rt); err != nil && !errors.Is(err, unix.ESRCH) {
			errs = append(errs, fmt.Errorf("when removing the stale pod route to %s: %w", rt.Dst, err))
		}
	}
	for _, rt := range want {
		if err := nl.RouteReplace(&rt); err != nil {
			errs = append(errs, fmt.Errorf("when routing pod range %s: %w", rt.Dst, err))
		}
	}
	return errors.Join(errs...)
}

// ipNet converts an IPv4 prefix.
func ipNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Masked().Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), 32)}
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
