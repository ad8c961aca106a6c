package network

import (
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"cairn.dev/cairn/pkg/fixture"
	"cairn.dev/cairn/proto/api"
)

func staticNetworkConfig(st *api.NetworkConfig_StaticConfig) *api.NetworkConfig {
	return &api.NetworkConfig{Method: &api.NetworkConfig_Static{Static: st}}
}

// TestStatic applies a static configuration to a link chosen by hardware
// address, which gains carrier only after the service started.
func TestStatic(t *testing.T) {
	n := newTestNet(t)
	rs := n.runService(t, Config{NetworkConfig: staticNetworkConfig(&api.NetworkConfig_StaticConfig{
		HardwareAddress: clientMAC.String(),
		Addresses:       []string{"10.88.0.5/24", "10.89.0.5/16"},
		Gateway:         "10.88.0.1",
		Nameservers:     []string{"10.88.0.53", "2001:db8::53"},
	})})

	fixture.Eventually(t, 10*time.Second, "eth0 set up", func() error {
		l, err := n.clientNL.LinkByName("eth0")
		if err != nil {
			return err
		}
		if l.Attrs().RawFlags&unix.IFF_UP == 0 {
			return errors.New("eth0 is down")
		}
		return nil
	})
	// Without carrier, nothing is configured yet.
	time.Sleep(200 * time.Millisecond)
	if addrs := n.clientAddrs(t); len(addrs) != 0 {
		t.Errorf("eth0 addresses without carrier = %v, want none", addrs)
	}

	n.setPeerUp(t)
	want := netip.MustParsePrefix("10.88.0.5/24")
	if got := rs.waitAddress(t, 10*time.Second, "set", valid); got != want {
		t.Errorf("published address = %s, want %s", got, want)
	}
	for _, p := range []string{"10.88.0.5/24", "10.89.0.5/16"} {
		if a, ok := n.clientAddr(t, netip.MustParsePrefix(p)); !ok {
			t.Errorf("eth0 addresses = %v, want %s among them", n.clientAddrs(t), p)
		} else if a.ValidLft != 0 && a.ValidLft != 0xffffffff {
			t.Errorf("address %s valid lifetime = %d, want forever", p, a.ValidLft)
		}
	}
	if diff := cmp.Diff([]string{"10.88.0.1"}, n.defaultGateways(t)); diff != "" {
		t.Errorf("default gateways (-want +got):\n%s", diff)
	}
	wantResolv := "# Written by the Cairn network service from the static configuration.\n" +
		"nameserver 10.88.0.53\nnameserver 2001:db8::53\n"
	if got := rs.readFile(t, "resolv.conf"); got != wantResolv {
		t.Errorf("resolv.conf = %q, want %q", got, wantResolv)
	}
	if got, want := rs.readFile(t, "hostname"), DefaultHostname+"\n"; got != want {
		t.Errorf("hostname file = %q, want %q", got, want)
	}
	if got := rs.ntpServers(t); len(got) != 0 {
		t.Errorf("published NTP servers = %v, want none from a static configuration", got)
	}
}

func TestParseStaticConfig(t *testing.T) {
	for _, tc := range []struct {
		name    string
		st      *api.NetworkConfig_StaticConfig
		want    *staticConfig
		wantErr bool
	}{
		{
			name: "full",
			st: &api.NetworkConfig_StaticConfig{
				HardwareAddress: "52:54:00:12:34:56",
				Addresses:       []string{"10.0.2.15/24"},
				Gateway:         "10.0.2.2",
				Nameservers:     []string{"10.0.2.3"},
			},
			want: &staticConfig{
				hw:          net.HardwareAddr{0x52, 0x54, 0, 0x12, 0x34, 0x56},
				addresses:   []netip.Prefix{netip.MustParsePrefix("10.0.2.15/24")},
				gateway:     netip.MustParseAddr("10.0.2.2"),
				nameservers: []netip.Addr{netip.MustParseAddr("10.0.2.3")},
			},
		},
		{
			name: "address only",
			st:   &api.NetworkConfig_StaticConfig{Addresses: []string{"192.168.1.2/32"}},
			want: &staticConfig{addresses: []netip.Prefix{netip.MustParsePrefix("192.168.1.2/32")}},
		},
		{name: "no address", st: &api.NetworkConfig_StaticConfig{}, wantErr: true},
		{name: "no prefix", st: &api.NetworkConfig_StaticConfig{Addresses: []string{"10.0.2.15"}}, wantErr: true},
		{name: "prefix 0", st: &api.NetworkConfig_StaticConfig{Addresses: []string{"10.0.2.15/0"}}, wantErr: true},
		{name: "IPv6 address", st: &api.NetworkConfig_StaticConfig{Addresses: []string{"2001:db8::1/64"}}, wantErr: true},
		{name: "broadcast address", st: &api.NetworkConfig_StaticConfig{Addresses: []string{"255.255.255.255/24"}}, wantErr: true},
		{name: "bad MAC", st: &api.NetworkConfig_StaticConfig{HardwareAddress: "52:54", Addresses: []string{"10.0.2.15/24"}}, wantErr: true},
		{name: "gateway off subnet", st: &api.NetworkConfig_StaticConfig{Addresses: []string{"10.0.2.15/24"}, Gateway: "10.0.3.1"}, wantErr: true},
		{name: "gateway is own address", st: &api.NetworkConfig_StaticConfig{Addresses: []string{"10.0.2.15/24"}, Gateway: "10.0.2.15"}, wantErr: true},
		{name: "bad gateway", st: &api.NetworkConfig_StaticConfig{Addresses: []string{"10.0.2.15/24"}, Gateway: "router"}, wantErr: true},
		{name: "bad nameserver", st: &api.NetworkConfig_StaticConfig{Addresses: []string{"10.0.2.15/24"}, Nameservers: []string{"dns"}}, wantErr: true},
		{
			name:    "too many nameservers",
			st:      &api.NetworkConfig_StaticConfig{Addresses: []string{"10.0.2.15/24"}, Nameservers: []string{"1.1.1.1", "1.0.0.1", "8.8.8.8", "8.8.4.4"}},
			wantErr: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseStaticConfig(tc.st)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("parseStaticConfig(%v) = %+v, want an error", tc.st, got)
				}
				return
			}
			if err != nil {
				t.Fatalf("parseStaticConfig(%v): %v", tc.st, err)
			}
			if diff := cmp.Diff(tc.want, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b }),
				cmp.Comparer(func(a, b netip.Prefix) bool { return a == b }), cmp.AllowUnexported(staticConfig{})); diff != "" {
				t.Errorf("parseStaticConfig(%v) (-want +got):\n%s", tc.st, diff)
			}
		})
	}
}

// FuzzParseStaticConfig feeds the parser what an operator (or a corrupted
// parameters file) may write: it must return an error or a configuration
// that holds together, and never panic.
func FuzzParseStaticConfig(f *testing.F) {
	f.Add("52:54:00:12:34:56", "10.0.2.15/24", "10.0.2.2", "10.0.2.3")
	f.Add("", "192.168.0.1/32", "", "::1")
	f.Add("zz", "1.2.3.4/33", "1.2.3.4", "")
	f.Fuzz(func(t *testing.T, hw, addr, gw, ns string) {
		st := &api.NetworkConfig_StaticConfig{HardwareAddress: hw, Addresses: []string{addr}, Gateway: gw}
		if ns != "" {
			st.Nameservers = []string{ns}
		}
		sc, err := parseStaticConfig(st)
		if err != nil {
			return
		}
		if len(sc.addresses) != 1 || !sc.addresses[0].Addr().Is4() || sc.addresses[0].Bits() < 1 {
			t.Errorf("parseStaticConfig(%q) addresses = %v", addr, sc.addresses)
		}
		if sc.gateway.IsValid() && !sc.addresses[0].Contains(sc.gateway) {
			t.Errorf("parseStaticConfig gateway %s outside %s", sc.gateway, sc.addresses[0])
		}
	})
}
