package network

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv4/nclient4"
	"golang.org/x/sys/unix"

	"cairn.dev/cairn/pkg/event"
	"cairn.dev/cairn/pkg/event/memory"
	"cairn.dev/cairn/pkg/fixture"
	"cairn.dev/cairn/pkg/supervisor"
)

var (
	firstLease  = netip.MustParsePrefix("10.77.0.10/24")
	secondLease = netip.MustParsePrefix("10.77.0.11/24")
)

func valid(p netip.Prefix) bool   { return p.IsValid() }
func invalid(p netip.Prefix) bool { return !p.IsValid() }

// TestDHCPLeaseAndRenewal runs the full exchange and two renewals: the
// lease's address, route, resolvers and hostname must be in place, and
// stay past the first lease's expiry because renewals extended it.
func TestDHCPLeaseAndRenewal(t *testing.T) {
	n := newTestNet(t)
	n.setPeerUp(t)
	ts := startTestServer(t, n.server, 4*time.Second, 2*time.Second, 3*time.Second)
	rs := n.runService(t, Config{NodeID: "cairn-0123456789abcdef"})

	got := rs.waitAddress(t, 20*time.Second, "set", valid)
	bound := time.Now()
	if got != firstLease {
		t.Errorf("published address = %s, want %s", got, firstLease)
	}
	a, ok := n.clientAddr(t, firstLease)
	if !ok {
		t.Fatalf("eth0 addresses = %v, want %s among them", n.clientAddrs(t), firstLease)
	}
	if a.ValidLft <= 0 || a.ValidLft > 4 {
		t.Errorf("address valid lifetime = %ds, want the lease's 4s at most", a.ValidLft)
	}
	if diff := cmp.Diff([]string{"10.77.0.1"}, n.defaultGateways(t)); diff != "" {
		t.Errorf("default gateways (-want +got):\n%s", diff)
	}
	if got := rs.readFile(t, "resolv.conf"); !strings.Contains(got, "nameserver 10.77.0.53\n") {
		t.Errorf("resolv.conf = %q, want a nameserver 10.77.0.53 line", got)
	}
	if got, want := rs.readFile(t, "hostname"), "cairn-0123456789abcdef\n"; got != want {
		t.Errorf("hostname file = %q, want %q", got, want)
	}
	if got, want := rs.ntpServers(t), []netip.Addr{netip.MustParseAddr("10.77.0.123")}; !slices.Equal(got, want) {
		t.Errorf("published NTP servers = %v, want %v", got, want)
	}
	lo, err := n.clientNL.LinkByName("lo")
	if err != nil {
		t.Fatalf("LinkByName(lo): %v", err)
	}
	if lo.Attrs().RawFlags&unix.IFF_UP == 0 {
		t.Errorf("loopback is not up")
	}

	fixture.Eventually(t, 10*time.Second, "server seeing two renewals", func() error {
		if renewals, _ := ts.counts(); renewals < 2 {
			return fmt.Errorf("%d renewals so far", renewals)
		}
		return nil
	})
	// The first lease alone would have expired by now.
	time.Sleep(time.Until(bound.Add(4500 * time.Millisecond)))
	if _, ok := n.clientAddr(t, firstLease); !ok {
		t.Errorf("eth0 addresses = %v after renewals, want %s kept", n.clientAddrs(t), firstLease)
	}
	if _, rebinds := ts.counts(); rebinds != 0 {
		t.Errorf("server saw %d rebinding requests, want none while renewals succeed", rebinds)
	}
	// A renewal with the same address publishes nothing new.
	w := rs.address.Watch()
	defer w.Close()
	if p, err := w.Get(t.Context()); err != nil || p != firstLease {
		t.Fatalf("published address = %v, %v, want %s", p, err, firstLease)
	}
	if p, err := w.Get(t.Context(), event.BacklogOnly[netip.Prefix]()); !errors.Is(err, event.ErrBacklogDone) {
		t.Errorf("after renewals, Get = %v, %v, want no new value", p, err)
	}
}

// TestDHCPBoundHoldsNoRawSocket: the raw socket of DISCOVERs and
// rebinding, which receives every IPv4 packet of the link, is closed
// while the lease is held.
func TestDHCPBoundHoldsNoRawSocket(t *testing.T) {
	n := newTestNet(t)
	n.setPeerUp(t)
	startTestServer(t, n.server, time.Hour, 30*time.Minute, 45*time.Minute)
	rs := n.runService(t, Config{})
	rs.waitAddress(t, 20*time.Second, "set", valid)
	fixture.Eventually(t, 10*time.Second, "the raw socket closed", func() error {
		if k := n.rawIPSockets(t); k != 0 {
			return fmt.Errorf("%d raw IPv4 sockets open in the client's namespace while bound", k)
		}
		return nil
	})
	// The count sees such a socket: one opened here is counted.
	var conn net.PacketConn
	if err := inNamespace(n.client, func() error {
		var err error
		conn, err = nclient4.NewRawUDPConn("eth0", dhcpv4.ClientPort)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if k := n.rawIPSockets(t); k != 1 {
		t.Errorf("%d raw IPv4 sockets counted with one open, want 1", k)
	}
}

// rawIPSockets counts the packet sockets of IPv4 (the DHCP client's raw
// socket) open in the client's namespace, from /proc/net/packet.
func (n *testNet) rawIPSockets(t *testing.T) int {
	t.Helper()
	var b []byte
	if err := inNamespace(n.client, func() error {
		var err error
		// thread-self: /proc/net is the namespace of the process's
		// first thread, not of this one.
		b, err = os.ReadFile("/proc/thread-self/net/packet")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	count := 0
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n")[1:] {
		// sk RefCnt Type Proto Iface R Rmem User Inode
		if f := strings.Fields(line); len(f) > 3 && (f[3] == "800" || f[3] == "0800") {
			count++
		}
	}
	return count
}

// TestDHCPRebindingAndExpiry stops the server from extending the lease:
// the client must renew, rebind, then drop the address at expiry, and
// start over, getting a lease again once the server answers.
func TestDHCPRebindingAndExpiry(t *testing.T) {
	n := newTestNet(t)
	n.setPeerUp(t)
	ts := startTestServer(t, n.server, 4*time.Second, 2*time.Second, 3*time.Second)
	ts.setMode(ignoreExtensions)
	rs := n.runService(t, Config{})

	rs.waitAddress(t, 20*time.Second, "set", valid)
	rs.waitAddress(t, 10*time.Second, "cleared at expiry", invalid)
	if _, ok := n.clientAddr(t, firstLease); ok {
		t.Errorf("eth0 addresses = %v after expiry, want %s gone", n.clientAddrs(t), firstLease)
	}
	if gws := n.defaultGateways(t); len(gws) != 0 {
		t.Errorf("default gateways after expiry = %v, want none", gws)
	}
	if got := rs.ntpServers(t); len(got) != 0 {
		t.Errorf("published NTP servers after expiry = %v, want none", got)
	}
	renewals, rebinds := ts.counts()
	if renewals == 0 || rebinds == 0 {
		t.Errorf("server saw %d renewals and %d rebinds, want both", renewals, rebinds)
	}

	ts.setMode(answerExtensions)
	got := rs.waitAddress(t, 20*time.Second, "set again", valid)
	if got != firstLease {
		t.Errorf("published address = %s, want %s", got, firstLease)
	}
}

// TestDHCPNakRestarts makes the server reject the renewal and move the
// client to another address.
func TestDHCPNakRestarts(t *testing.T) {
	n := newTestNet(t)
	n.setPeerUp(t)
	ts := startTestServer(t, n.server, 4*time.Second, 1*time.Second, 3*time.Second)
	ts.setMode(nakExtensions)
	rs := n.runService(t, Config{})

	if got := rs.waitAddress(t, 20*time.Second, "set", valid); got != firstLease {
		t.Fatalf("published address = %s, want %s", got, firstLease)
	}
	rs.waitAddress(t, 10*time.Second, "cleared after NAK", invalid)
	// The new exchange has no ciaddr, so the server acknowledges it.
	if got := rs.waitAddress(t, 20*time.Second, "set again", valid); got != secondLease {
		t.Errorf("published address after NAK = %s, want %s", got, secondLease)
	}
	if _, ok := n.clientAddr(t, firstLease); ok {
		t.Errorf("eth0 addresses = %v, want %s gone after NAK", n.clientAddrs(t), firstLease)
	}
	if _, ok := n.clientAddr(t, secondLease); !ok {
		t.Errorf("eth0 addresses = %v, want %s", n.clientAddrs(t), secondLease)
	}
}

// TestDHCPStopKeepsAddress stops the service while it holds a lease: the
// address must stay on the link, for what still runs above the network
// while the node shuts down.
func TestDHCPStopKeepsAddress(t *testing.T) {
	n := newTestNet(t)
	n.setPeerUp(t)
	startTestServer(t, n.server, time.Minute, 30*time.Second, 45*time.Second)
	address := &memory.Value[netip.Prefix]{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sup := supervisor.New(ctx, New(Config{
		Namespace:       n.client,
		ExternalAddress: address,
		ResolvConfPath:  filepath.Join(t.TempDir(), "resolv.conf"),
		HostnamePath:    filepath.Join(t.TempDir(), "hostname"),
	}).Run, supervisor.WithPropagatePanic())
	rs := &runningService{address: address}
	if got := rs.waitAddress(t, 20*time.Second, "set", valid); got != firstLease {
		t.Fatalf("published address = %s, want %s", got, firstLease)
	}
	cancel()
	// Once the supervisor is done, every runnable (the DHCP client too)
	// has returned.
	stopped := make(chan error, 1)
	go func() { stopped <- sup.Wait() }()
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatalf("the service stopped with %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the service did not stop within 10s of its cancellation")
	}
	if _, ok := n.clientAddr(t, firstLease); !ok {
		t.Errorf("eth0 addresses after the service stopped = %v, want %s kept", n.clientAddrs(t), firstLease)
	}
}

// TestRetryBackoff checks the waits between attempts to get a lease: from
// a second, doubling up to 30s, 20% jitter either way, never giving up,
// and from a second again after Reset.
func TestRetryBackoff(t *testing.T) {
	b := newRetryBackoff()
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 30 * time.Second, 30 * time.Second}
	check := func(i int, got, want time.Duration) {
		t.Helper()
		if got < want*8/10 || got > want*12/10 {
			t.Errorf("wait %d = %v, want %v ± 20%%", i, got, want)
		}
	}
	for i, w := range want {
		check(i, b.NextBackOff(), w)
	}
	for i := range 100 {
		check(len(want)+i, b.NextBackOff(), 30*time.Second)
	}
	// A client that has tried for a year still tries.
	b.Clock = fixedClock(time.Now().Add(365 * 24 * time.Hour))
	check(len(want)+100, b.NextBackOff(), 30*time.Second)
	b.Reset()
	check(0, b.NextBackOff(), time.Second)
}

// fixedClock is a backoff.Clock that always says the same time.
type fixedClock time.Time

func (c fixedClock) Now() time.Time { return time.Time(c) }
