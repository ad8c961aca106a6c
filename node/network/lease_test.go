package network

import (
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
)

// testACK builds an ACK as a well-behaved server would, changed by mods.
func testACK(t testing.TB, mods ...dhcpv4.Modifier) *dhcpv4.DHCPv4 {
	t.Helper()
	base := []dhcpv4.Modifier{
		dhcpv4.WithMessageType(dhcpv4.MessageTypeAck),
		dhcpv4.WithYourIP(net.IPv4(10, 0, 2, 15)),
		dhcpv4.WithOption(dhcpv4.OptServerIdentifier(net.IPv4(10, 0, 2, 2))),
		dhcpv4.WithOption(dhcpv4.OptSubnetMask(net.CIDRMask(24, 32))),
		dhcpv4.WithOption(dhcpv4.OptIPAddressLeaseTime(time.Hour)),
		dhcpv4.WithOption(dhcpv4.OptRouter(net.IPv4(10, 0, 2, 2))),
		dhcpv4.WithOption(dhcpv4.OptDNS(net.IPv4(10, 0, 2, 3))),
	}
	ack, err := dhcpv4.New(append(base, mods...)...)
	if err != nil {
		t.Fatalf("dhcpv4.New: %v", err)
	}
	return ack
}

func TestLeaseFromACK(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		name             string
		mods             []dhcpv4.Modifier
		wantErr          bool
		address          string
		router           string
		t1, t2, duration time.Duration
		nameservers      int
	}{
		{name: "plain", address: "10.0.2.15/24", router: "10.0.2.2", t1: 30 * time.Minute, t2: 52*time.Minute + 30*time.Second, duration: time.Hour, nameservers: 1},
		{
			name: "server timers",
			mods: []dhcpv4.Modifier{
				dhcpv4.WithOption(dhcpv4.OptRenewTimeValue(10 * time.Minute)),
				dhcpv4.WithOption(dhcpv4.OptRebindingTimeValue(20 * time.Minute)),
			},
			address: "10.0.2.15/24", router: "10.0.2.2", t1: 10 * time.Minute, t2: 20 * time.Minute, duration: time.Hour, nameservers: 1,
		},
		{
			name:    "T2 past the lease",
			mods:    []dhcpv4.Modifier{dhcpv4.WithOption(dhcpv4.OptRebindingTimeValue(2 * time.Hour))},
			address: "10.0.2.15/24", router: "10.0.2.2", t1: 30 * time.Minute, t2: 52*time.Minute + 30*time.Second, duration: time.Hour, nameservers: 1,
		},
		{
			name:    "no mask is classful",
			mods:    []dhcpv4.Modifier{func(d *dhcpv4.DHCPv4) { d.Options.Del(dhcpv4.OptionSubnetMask) }},
			address: "10.0.2.15/8", router: "10.0.2.2", t1: 30 * time.Minute, t2: 52*time.Minute + 30*time.Second, duration: time.Hour, nameservers: 1,
		},
		{
			name: "bad router and duplicate resolvers",
			mods: []dhcpv4.Modifier{
				dhcpv4.WithOption(dhcpv4.OptRouter(net.IPv4zero)),
				dhcpv4.WithOption(dhcpv4.OptDNS(net.IPv4(1, 1, 1, 1), net.IPv4(1, 1, 1, 1), net.IPv4bcast, net.IPv4(8, 8, 8, 8))),
			},
			address: "10.0.2.15/24", t1: 30 * time.Minute, t2: 52*time.Minute + 30*time.Second, duration: time.Hour, nameservers: 2,
		},
		{name: "NAK", mods: []dhcpv4.Modifier{dhcpv4.WithMessageType(dhcpv4.MessageTypeNak)}, wantErr: true},
		{name: "no address", mods: []dhcpv4.Modifier{dhcpv4.WithYourIP(net.IPv4zero)}, wantErr: true},
		{name: "multicast address", mods: []dhcpv4.Modifier{dhcpv4.WithYourIP(net.IPv4(224, 0, 0, 1))}, wantErr: true},
		{name: "no server", mods: []dhcpv4.Modifier{func(d *dhcpv4.DHCPv4) { d.Options.Del(dhcpv4.OptionServerIdentifier) }}, wantErr: true},
		{name: "no lease time", mods: []dhcpv4.Modifier{func(d *dhcpv4.DHCPv4) { d.Options.Del(dhcpv4.OptionIPAddressLeaseTime) }}, wantErr: true},
		{name: "zero lease time", mods: []dhcpv4.Modifier{dhcpv4.WithOption(dhcpv4.OptIPAddressLeaseTime(0))}, wantErr: true},
		{name: "bad mask", mods: []dhcpv4.Modifier{dhcpv4.WithOption(dhcpv4.OptSubnetMask(net.IPv4Mask(255, 0, 255, 0)))}, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ack := testACK(t, tc.mods...)
			l, err := leaseFromACK(nil, ack, now)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("leaseFromACK(%s) = %+v, want an error", ack.Summary(), l)
				}
				return
			}
			if err != nil {
				t.Fatalf("leaseFromACK(%s): %v", ack.Summary(), err)
			}
			if got := l.address.String(); got != tc.address {
				t.Errorf("address = %q, want %q", got, tc.address)
			}
			router := ""
			if l.router.IsValid() {
				router = l.router.String()
			}
			if router != tc.router {
				t.Errorf("router = %q, want %q", router, tc.router)
			}
			if l.t1 != tc.t1 || l.t2 != tc.t2 || l.duration != tc.duration {
				t.Errorf("T1, T2, lease = %s, %s, %s, want %s, %s, %s", l.t1, l.t2, l.duration, tc.t1, tc.t2, tc.duration)
			}
			if len(l.nameservers) != tc.nameservers {
				t.Errorf("nameservers = %v, want %d of them", l.nameservers, tc.nameservers)
			}
			if l.raw.Offer != ack {
				t.Errorf("lease without an offer keeps %v as offer, want the ACK", l.raw.Offer)
			}
		})
	}
}

// TestLeaseNTPServers reads option 42 (RFC 2132, section 8.3): the
// servers in the server's order, without duplicates or addresses no
// server can have, and at most maxNTPServers of them.
func TestLeaseNTPServers(t *testing.T) {
	ip := func(s string) net.IP { return net.ParseIP(s).To4() }
	for _, tc := range []struct {
		name string
		mods []dhcpv4.Modifier
		want []netip.Addr
	}{
		{name: "none"},
		{
			name: "one",
			mods: []dhcpv4.Modifier{dhcpv4.WithOption(dhcpv4.OptNTPServers(ip("10.0.2.2")))},
			want: []netip.Addr{netip.MustParseAddr("10.0.2.2")},
		},
		{
			name: "in order",
			mods: []dhcpv4.Modifier{dhcpv4.WithOption(dhcpv4.OptNTPServers(ip("192.0.2.7"), ip("10.0.2.2")))},
			want: []netip.Addr{netip.MustParseAddr("192.0.2.7"), netip.MustParseAddr("10.0.2.2")},
		},
		{
			name: "bad and duplicate ones dropped",
			mods: []dhcpv4.Modifier{dhcpv4.WithOption(dhcpv4.OptNTPServers(
				ip("0.0.0.0"), ip("10.0.2.2"), ip("224.0.1.1"), ip("127.0.0.1"), ip("10.0.2.2"), ip("255.255.255.255"), ip("10.0.2.3")))},
			want: []netip.Addr{netip.MustParseAddr("10.0.2.2"), netip.MustParseAddr("10.0.2.3")},
		},
		{
			name: "at most four",
			mods: []dhcpv4.Modifier{dhcpv4.WithOption(dhcpv4.OptNTPServers(
				ip("10.0.0.1"), ip("10.0.0.2"), ip("10.0.0.3"), ip("10.0.0.4"), ip("10.0.0.5")))},
			want: []netip.Addr{netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"),
				netip.MustParseAddr("10.0.0.3"), netip.MustParseAddr("10.0.0.4")},
		},
		{
			// Not a multiple of four bytes: the option is unreadable,
			// and the rest of the lease still good.
			name: "malformed",
			mods: []dhcpv4.Modifier{dhcpv4.WithOption(dhcpv4.OptGeneric(dhcpv4.OptionNTPServers, []byte{10, 0, 2, 2, 10}))},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ack := testACK(t, tc.mods...)
			l, err := leaseFromACK(nil, ack, time.Now())
			if err != nil {
				t.Fatalf("leaseFromACK(%s): %v", ack.Summary(), err)
			}
			if !slices.Equal(l.ntpServers, tc.want) {
				t.Errorf("NTP servers of %s = %v, want %v", ack.Summary(), l.ntpServers, tc.want)
			}
		})
	}
}

func TestLeaseLifetime(t *testing.T) {
	now := time.Now()
	l := &lease{acquired: now, duration: 10 * time.Second}
	for _, tc := range []struct {
		at   time.Duration
		want int
	}{
		{0, 10}, {500 * time.Millisecond, 10}, {9 * time.Second, 1}, {20 * time.Second, 1},
	} {
		if got := l.lifetimeSeconds(now.Add(tc.at)); got != tc.want {
			t.Errorf("lifetimeSeconds(acquired+%s) = %d, want %d", tc.at, got, tc.want)
		}
	}
	l.duration = infiniteLease
	if got := l.lifetimeSeconds(now); got != 0 {
		t.Errorf("lifetimeSeconds of an infinite lease = %d, want 0 (forever)", got)
	}
}

// FuzzLeaseFromACK feeds leaseFromACK whatever parses as a DHCP message:
// anything on the link can send one. A lease it accepts must hold
// together, since the client computes timers and netlink calls from it.
func FuzzLeaseFromACK(f *testing.F) {
	f.Add(testACK(f).ToBytes())
	f.Add(testACK(f, dhcpv4.WithOption(dhcpv4.OptRenewTimeValue(0)), dhcpv4.WithOption(dhcpv4.OptRebindingTimeValue(time.Second))).ToBytes())
	f.Add(testACK(f, dhcpv4.WithOption(dhcpv4.OptIPAddressLeaseTime(infiniteLease))).ToBytes())
	now := time.Now()
	f.Fuzz(func(t *testing.T, b []byte) {
		ack, err := dhcpv4.FromBytes(b)
		if err != nil {
			return
		}
		l, err := leaseFromACK(nil, ack, now)
		if err != nil {
			return
		}
		if !(0 < l.t1 && l.t1 <= l.t2 && l.t2 <= l.duration) {
			t.Errorf("timers T1 %s, T2 %s, lease %s out of order", l.t1, l.t2, l.duration)
		}
		if !l.address.Addr().Is4() || l.address.Bits() < 1 || l.address.Bits() > 32 {
			t.Errorf("address %s is not an IPv4 prefix", l.address)
		}
		if !l.server.Is4() || (l.router.IsValid() && !l.router.Is4()) {
			t.Errorf("server %s or router %s is not IPv4", l.server, l.router)
		}
		if len(l.nameservers) > maxNameservers {
			t.Errorf("%d nameservers, want at most %d", len(l.nameservers), maxNameservers)
		}
		if len(l.ntpServers) > maxNTPServers {
			t.Errorf("%d NTP servers, want at most %d", len(l.ntpServers), maxNTPServers)
		}
		for _, a := range l.ntpServers {
			if !a.Is4() || a.IsUnspecified() || a.IsMulticast() || a.IsLoopback() {
				t.Errorf("NTP server %s is not a unicast IPv4 address", a)
			}
		}
		if l.lifetimeSeconds(now) < 0 {
			t.Errorf("negative lifetime")
		}
	})
}
