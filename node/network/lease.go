package network

import (
	"fmt"
	"math"
	"net"
	"net/netip"
	"slices"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv4/nclient4"
)

// maxNameservers is how many resolvers resolv.conf can hold (MAXNS of the
// C resolvers); more are dropped.
const maxNameservers = 3

// maxNTPServers is how many NTP servers of a lease are kept; more are
// dropped. A node asks one at a time, and the next only when one fails.
const maxNTPServers = 4

// infiniteLease is the lease time a server gives for a lease that never
// expires (RFC 2131, section 3.3).
const infiniteLease = time.Duration(math.MaxUint32) * time.Second

// lease is what the client keeps of a DHCP lease: the server's ACK read
// into the values the node acts on. Everything in it came from the
// network and was checked by leaseFromACK.
type lease struct {
	// address is the leased address with the prefix length of its subnet.
	address netip.Prefix
	// router is the default gateway; not valid when the server sent none.
	router netip.Addr
	// nameservers are the DNS resolvers, most preferred first.
	nameservers []netip.Addr
	// ntpServers are the NTP servers (option 42), most preferred first.
	ntpServers []netip.Addr
	// server is the server identifier, where renewals are sent.
	server netip.Addr
	// duration, t1 and t2 count from acquired: the lease expires after
	// duration (infiniteLease: never), renewal starts at t1 and rebinding
	// at t2, with 0 < t1 <= t2 <= duration.
	duration, t1, t2 time.Duration
	// acquired is when the request that this ACK answers was sent.
	acquired time.Time
	// raw is the exchange itself, needed to build renewal requests.
	raw *nclient4.Lease
}

func (l *lease) t1At() time.Time   { return l.acquired.Add(l.t1) }
func (l *lease) t2At() time.Time   { return l.acquired.Add(l.t2) }
func (l *lease) expiry() time.Time { return l.acquired.Add(l.duration) }

// infinite tells whether the lease never expires.
func (l *lease) infinite() bool { return l.duration >= infiniteLease }

// remaining is how much of the lease is left at now, rounded up to whole
// seconds for address lifetimes; 0 means the lease never expires.
func (l *lease) lifetimeSeconds(now time.Time) int {
	if l.infinite() {
		return 0
	}
	left := l.expiry().Sub(now)
	secs := int((left + time.Second - 1) / time.Second)
	return max(secs, 1)
}

// leaseFromACK checks a server's ACK and reads it into a lease acquired at
// the given time. offer is the offer the exchange began with, kept for
// renewals; it may be nil. An ACK that cannot be used, because it lacks an
// address, a server identifier or a lease time, or carries nonsense in
// them, is an error: the client then treats the exchange as failed.
func leaseFromACK(offer, ack *dhcpv4.DHCPv4, acquired time.Time) (*lease, error) {
	if ack.MessageType() != dhcpv4.MessageTypeAck {
		return nil, fmt.Errorf("reply is a %s, not an ACK", ack.MessageType())
	}
	addr, ok := unicastIPv4(ack.YourIPAddr)
	if !ok {
		return nil, fmt.Errorf("ACK assigns no usable address (%v)", ack.YourIPAddr)
	}
	mask := ack.SubnetMask()
	if mask == nil {
		// RFC 2131 lets the client pick; the classful mask is what
		// clients traditionally assume.
		mask = net.IP(addr.AsSlice()).DefaultMask()
	}
	ones, bits := mask.Size()
	if bits != 32 || ones == 0 {
		return nil, fmt.Errorf("ACK has invalid subnet mask %v", mask)
	}
	server, ok := unicastIPv4(ack.ServerIdentifier())
	if !ok {
		return nil, fmt.Errorf("ACK has no usable server identifier (%v)", ack.ServerIdentifier())
	}
	duration := ack.IPAddressLeaseTime(0)
	if duration < time.Second {
		return nil, fmt.Errorf("ACK has no usable lease time (%v)", duration)
	}
	l := &lease{
		address:  netip.PrefixFrom(addr, ones),
		server:   server,
		duration: duration,
		acquired: acquired,
		raw:      &nclient4.Lease{Offer: offer, ACK: ack, CreationTime: acquired},
	}
	if l.raw.Offer == nil {
		l.raw.Offer = ack
	}
	l.t1, l.t2 = renewalTimes(ack, duration)
	for _, r := range ack.Router() {
		if a, ok := unicastIPv4(r); ok {
			l.router = a
			break
		}
	}
	l.nameservers = addresses(ack.DNS(), maxNameservers)
	l.ntpServers = addresses(ack.NTPServers(), maxNTPServers)
	return l, nil
}

// addresses returns the first n distinct unicast IPv4 addresses of ips,
// in their order, dropping the others.
func addresses(ips []net.IP, n int) []netip.Addr {
	var as []netip.Addr
	for _, ip := range ips {
		a, ok := unicastIPv4(ip)
		if ok && !slices.Contains(as, a) && len(as) < n {
			as = append(as, a)
		}
	}
	return as
}

// renewalTimes returns T1 and T2 as the ACK gives them, or the defaults of
// RFC 2131 (half and seven eighths of the lease) where the ACK gives none
// or ones out of order.
func renewalTimes(ack *dhcpv4.DHCPv4, duration time.Duration) (t1, t2 time.Duration) {
	t1 = ack.IPAddressRenewalTime(0)
	t2 = ack.IPAddressRebindingTime(0)
	if t2 <= 0 || t2 > duration {
		// Not duration*7/8: that overflows for an infinite lease.
		t2 = duration - duration/8
	}
	if t1 <= 0 || t1 > t2 {
		t1 = min(duration/2, t2)
	}
	return t1, t2
}

// unicastIPv4 converts ip to a netip.Addr if it is an IPv4 address a host
// can have: not unspecified, broadcast, multicast or loopback.
func unicastIPv4(ip net.IP) (netip.Addr, bool) {
	ip4 := ip.To4()
	if ip4 == nil {
		return netip.Addr{}, false
	}
	a, _ := netip.AddrFromSlice(ip4)
	if a.IsUnspecified() || a.IsMulticast() || a.IsLoopback() || a == netip.AddrFrom4([4]byte{255, 255, 255, 255}) {
		return netip.Addr{}, false
	}
	return a, true
}
