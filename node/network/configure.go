package network

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// This file holds what the address workers do to the system: addresses
// and routes through netlink, resolv.conf and the hostname through files.

// nlLink is enough of a netlink.Link for address and route calls.
func (l link) nlLink() netlink.Link {
	return &netlink.Device{LinkAttrs: netlink.LinkAttrs{Index: l.index, Name: l.name}}
}

func ipNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

// setAddress adds p to l or refreshes it, valid for lifetime seconds (0:
// forever). The kernel itself removes an address whose lifetime ran out.
func setAddress(nl *netlink.Handle, l link, p netip.Prefix, lifetime int) error {
	a := &netlink.Addr{IPNet: ipNet(p), ValidLft: lifetime, PreferedLft: lifetime}
	if err := nl.AddrReplace(l.nlLink(), a); err != nil {
		return fmt.Errorf("when setting address %s on %s: %w", p, l.name, err)
	}
	return nil
}

// removeAddress removes p from l; an address already gone is no error.
func removeAddress(nl *netlink.Handle, l link, p netip.Prefix) error {
	a := &netlink.Addr{IPNet: ipNet(p)}
	err := nl.AddrDel(l.nlLink(), a)
	if err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) {
		return fmt.Errorf("when removing address %s from %s: %w", p, l.name, err)
	}
	return nil
}

func defaultRoute(l link, gw netip.Addr, proto netlink.RouteProtocol) *netlink.Route {
	return &netlink.Route{
		LinkIndex: l.index,
		Dst:       &net.IPNet{IP: net.IPv4zero, Mask: net.CIDRMask(0, 32)},
		Gw:        gw.AsSlice(),
		Protocol:  proto,
	}
}

// setDefaultRoute points the default IPv4 route at gw over l. proto tells
// who made the route (RTPROT_DHCP or RTPROT_STATIC).
func setDefaultRoute(nl *netlink.Handle, l link, gw netip.Addr, proto netlink.RouteProtocol) error {
	if err := nl.RouteReplace(defaultRoute(l, gw, proto)); err != nil {
		return fmt.Errorf("when setting default route via %s on %s: %w", gw, l.name, err)
	}
	return nil
}

// removeDefaultRoute removes the default route via gw over l; a route
// already gone (as when its address was removed) is no error.
func removeDefaultRoute(nl *netlink.Handle, l link, gw netip.Addr, proto netlink.RouteProtocol) error {
	err := nl.RouteDel(defaultRoute(l, gw, proto))
	if err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("when removing default route via %s on %s: %w", gw, l.name, err)
	}
	return nil
}

// resolvConf renders a resolv.conf naming the given resolvers; source
// says where they came from.
func resolvConf(nameservers []netip.Addr, source string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Written by the Cairn network service from %s.\n", source)
	for _, ns := range nameservers {
		fmt.Fprintf(&b, "nameserver %s\n", ns)
	}
	return b.String()
}

// writeResolvConf replaces the file at path with a resolv.conf for
// nameservers. It writes a new file and renames it over the old one, so
// that resolvers reading it never see half a file.
func writeResolvConf(path string, nameservers []netip.Addr, source string) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".resolv.conf.*")
	if err != nil {
		return fmt.Errorf("when writing resolv.conf: %w", err)
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.WriteString(resolvConf(nameservers, source))
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), 0o644)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("when writing resolv.conf: %w", err)
	}
	return nil
}

// writeHostname writes name to path. On the kernel's hostname file this
// sets the hostname.
func writeHostname(path, name string) error {
	if err := os.WriteFile(path, []byte(name+"\n"), 0o644); err != nil {
		return fmt.Errorf("when setting hostname: %w", err)
	}
	return nil
}
