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

// A podRange is a node's pod range.
type podRange struct {
	Node  string
	Range netip.Prefix
	// Ready is the Node's Ready condition.
	Ready bool
}

// The pod tunnel's routes to controllers that are no workers (each one's
// address through the tunnel) are in a table of their own, which only
// traffic from the pod range looks up: the answers of pods to what those
// controllers sent them through the tunnel go back through it, while
// everything else of the node's reaches them as before, WireGuard's own
// packets included.
const (
	controllerTable        = 0xca
	controllerRulePriority = 100
)

// routeThroughTunnel makes the pod range's one route of Cairn's the one
// into the tunnel device link: the node's own pods have routes of their
// own to their veths, more specific, and WireGuard sends the rest to the
// peer whose range holds the address, or drops it. Traffic from the pod
// range to controllers (their addresses) goes into the tunnel too.
func routeThroughTunnel(nl *netlink.Handle, link int, controllers []netip.Addr) error {
	_, err := keepPodRoutes(nl, unix.RT_TABLE_MAIN, []netlink.Route{{Dst: ipNet(podPrefix), LinkIndex: link, Protocol: podRouteProtocol}})
	if err != nil {
		return err
	}
	var want []netlink.Route
	for _, a := range controllers {
		want = append(want, netlink.Route{Dst: ipNet(netip.PrefixFrom(a, 32)), LinkIndex: link, Protocol: podRouteProtocol, Table: controllerTable})
	}
	if _, err := keepPodRoutes(nl, controllerTable, want); err != nil {
		return err
	}
	rules, err := controllerRules(nl)
	if err != nil || len(rules) > 0 {
		return err
	}
	rule := netlink.NewRule()
	rule.Src = ipNet(podPrefix)
	rule.Table = controllerTable
	rule.Priority = controllerRulePriority
	if err := nl.RuleAdd(rule); err != nil {
		return fmt.Errorf("when adding the rule that sends pods' answers to controllers through the tunnel: %w", err)
	}
	return nil
}

// controllerRules lists the rules that look the controller table up.
func controllerRules(nl *netlink.Handle) ([]netlink.Rule, error) {
	rules, err := nl.RuleListFiltered(netlink.FAMILY_V4, &netlink.Rule{Table: controllerTable}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return nil, fmt.Errorf("when listing the routing rules: %w", err)
	}
	return rules, nil
}

// removePodRoutes removes every route and rule of Cairn's pod network,
// and says how many routes it removed.
func removePodRoutes(nl *netlink.Handle) (int, error) {
	n := 0
	for _, table := range []int{unix.RT_TABLE_MAIN, controllerTable} {
		removed, err := keepPodRoutes(nl, table, nil)
		n += removed
		if err != nil {
			return n, err
		}
	}
	rules, err := controllerRules(nl)
	if err != nil {
		return n, err
	}
	for _, r := range rules {
		if err := nl.RuleDel(&r); err != nil && !errors.Is(err, unix.ENOENT) {
			return n, fmt.Errorf("when removing the rule of the controller table: %w", err)
		}
	}
	return n, nil
}

// keepPodRoutes makes Cairn's routes (podRouteProtocol) in table of nl
// want, and no others: it adds what is missing and removes what is not
// wanted, and says how many it removed.
func keepPodRoutes(nl *netlink.Handle, table int, want []netlink.Route) (removed int, err error) {
	have, err := listPodRoutes(nl, table)
	if err != nil {
		return 0, err
	}
	var errs []error
	for _, rt := range have {
		i := slices.IndexFunc(want, func(w netlink.Route) bool {
			return w.Dst.String() == rt.Dst.String() && w.Gw.Equal(rt.Gw) && w.LinkIndex == rt.LinkIndex
		})
		if i >= 0 {
			want = slices.Delete(want, i, i+1)
			continue
		}
		if err := nl.RouteDel(&rt); err != nil && !errors.Is(err, unix.ESRCH) {
			errs = append(errs, fmt.Errorf("when removing the stale pod route to %s: %w", rt.Dst, err))
			continue
		}
		removed++
	}
	for _, rt := range want {
		if err := nl.RouteReplace(&rt); err != nil {
			errs = append(errs, fmt.Errorf("when routing %s into the pod tunnel: %w", rt.Dst, err))
		}
	}
	return removed, errors.Join(errs...)
}

// ipNet converts an IPv4 prefix.
func ipNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Masked().Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), 32)}
}

// listPodRoutes lists the routes Cairn programmed in table.
func listPodRoutes(nl *netlink.Handle, table int) ([]netlink.Route, error) {
	rs, err := nl.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Protocol: podRouteProtocol, Table: table}, netlink.RT_FILTER_PROTOCOL|netlink.RT_FILTER_TABLE)
	if err != nil {
		return nil, fmt.Errorf("when listing pod routes: %w", err)
	}
	return rs, nil
}
