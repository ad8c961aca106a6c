package network

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"

	"golang.org/x/sys/unix"

	"cairn.dev/cairn/pkg/supervisor"
	"cairn.dev/cairn/proto/api"
)

// staticConfig is an api.NetworkConfig_StaticConfig checked and parsed.
type staticConfig struct {
	// hw selects the link; nil means the first Ethernet link with carrier.
	hw          net.HardwareAddr
	addresses   []netip.Prefix
	gateway     netip.Addr
	nameservers []netip.Addr
}

// staticConfig returns the static configuration of the Config, or nil when
// the node uses DHCP.
func (s *Service) staticConfig() (*staticConfig, error) {
	st := s.c.NetworkConfig.GetStatic()
	if st == nil {
		return nil, nil
	}
	sc, err := parseStaticConfig(st)
	if err != nil {
		return nil, fmt.Errorf("invalid static network configuration: %w", err)
	}
	return sc, nil
}

// parseStaticConfig checks the operator's static configuration. Every
// problem is an error naming the offending value: a node configured wrong
// must say so, not come up half configured.
func parseStaticConfig(st *api.NetworkConfig_StaticConfig) (*staticConfig, error) {
	sc := &staticConfig{}
	if st.GetHardwareAddress() != "" {
		hw, err := net.ParseMAC(st.GetHardwareAddress())
		if err != nil {
			return nil, fmt.Errorf("hardware address %q: %w", st.GetHardwareAddress(), err)
		}
		sc.hw = hw
	}
	if len(st.GetAddresses()) == 0 {
		return nil, errors.New("no addresses")
	}
	for _, a := range st.GetAddresses() {
		p, err := netip.ParsePrefix(a)
		if err != nil {
			return nil, fmt.Errorf("address %q: %w", a, err)
		}
		if _, ok := unicastIPv4(p.Addr().AsSlice()); !ok || !p.Addr().Is4() || p.Bits() == 0 {
			return nil, fmt.Errorf("address %q: not an IPv4 host address with a prefix length", a)
		}
		sc.addresses = append(sc.addresses, p)
	}
	if gw := st.GetGateway(); gw != "" {
		a, err := netip.ParseAddr(gw)
		if err != nil {
			return nil, fmt.Errorf("gateway %q: %w", gw, err)
		}
		if !sc.onLink(a) {
			return nil, fmt.Errorf("gateway %q: not in the subnet of any address", gw)
		}
		sc.gateway = a
	}
	for _, ns := range st.GetNameservers() {
		a, err := netip.ParseAddr(ns)
		if err != nil {
			return nil, fmt.Errorf("nameserver %q: %w", ns, err)
		}
		if a.Zone() != "" || a.IsUnspecified() || a.IsMulticast() {
			return nil, fmt.Errorf("nameserver %q: not a unicast address", ns)
		}
		sc.nameservers = append(sc.nameservers, a)
	}
	if len(sc.nameservers) > maxNameservers {
		return nil, fmt.Errorf("%d nameservers, at most %d are possible", len(sc.nameservers), maxNameservers)
	}
	return sc, nil
}

// onLink tells whether a is a host in the subnet of one of the addresses,
// other than that address itself.
func (sc *staticConfig) onLink(a netip.Addr) bool {
	for _, p := range sc.addresses {
		if p.Contains(a) && p.Addr() != a && a.Is4() {
			return true
		}
	}
	return false
}

// runStatic is the static worker: it configures the chosen link once it
// has carrier, publishes its first address and is done.
func (s *Service) runStatic(ctx context.Context, sc *staticConfig) error {
	log := supervisor.Logger(ctx)
	if sc.hw != nil {
		log.Infof("Waiting for link %s to have carrier", sc.hw)
	}
	l, err := s.waitLink(ctx, func(l link) bool {
		return sc.hw == nil || bytes.Equal(l.hw, sc.hw)
	})
	if err != nil {
		return err
	}
	nl, err := s.netlinkHandle()
	if err != nil {
		return err
	}
	defer nl.Close()
	for _, p := range sc.addresses {
		if err := setAddress(nl, l, p, 0); err != nil {
			return err
		}
	}
	if sc.gateway.IsValid() {
		if err := setDefaultRoute(nl, l, sc.gateway, unix.RTPROT_STATIC); err != nil {
			return err
		}
	}
	if err := writeResolvConf(s.c.ResolvConfPath, sc.nameservers, "the static configuration"); err != nil {
		return err
	}
	// The static configuration names no NTP servers.
	s.setNTPServers(nil)
	s.c.ExternalAddress.Set(sc.addresses[0])
	log.Infof("Static configuration applied to %s: addresses %v, gateway %v, nameservers %v",
		l.name, sc.addresses, sc.gateway, sc.nameservers)
	supervisor.Signal(ctx, supervisor.SignalHealthy)
	supervisor.Signal(ctx, supervisor.SignalDone)
	return nil
}
