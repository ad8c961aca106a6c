package network

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv4/nclient4"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"cairn.dev/cairn/pkg/logtree"
	"cairn.dev/cairn/pkg/sleep"
	"cairn.dev/cairn/pkg/supervisor"
)

// dhcpState is a state of the client, named as in RFC 2131, figure 5.
// INIT covers SELECTING and REQUESTING, which one nclient4 exchange does.
type dhcpState string

const (
	stateInit      dhcpState = "INIT"
	stateBound     dhcpState = "BOUND"
	stateRenewing  dhcpState = "RENEWING"
	stateRebinding dhcpState = "REBINDING"
)

const (
	// discoverTimeout bounds one DISCOVER-OFFER-REQUEST-ACK exchange.
	discoverTimeout = 15 * time.Second
	// minRetransmit is the shortest wait between renewal (or rebinding)
	// requests that RFC 2131 (section 4.4.5) allows, unless less is left
	// of the phase.
	minRetransmit = 60 * time.Second
	// Within one exchange (or one window of RENEWING and REBINDING),
	// nclient4 sends a message up to sendTries times, waiting
	// firstResend, then twice as long each time, for an answer: a lost
	// packet costs a second, not a window.
	firstResend = time.Second
	sendTries   = 4
)

// dhcpClient is the state of the DHCP worker on one link.
type dhcpClient struct {
	s     *Service
	nl    *netlink.Handle
	link  link
	log   logtree.LeveledLogger
	state dhcpState
	// lease is the lease applied to the link, nil in INIT.
	lease *lease
	// backoff spaces out attempts to get a lease after failed ones, and
	// after lost leases; a renewed lease resets it.
	backoff *backoff.ExponentialBackOff
}

// runDHCP is the DHCP worker: it waits for the first Ethernet link with
// carrier and keeps a lease on it for as long as it runs.
func (s *Service) runDHCP(ctx context.Context) error {
	l, err := s.waitLink(ctx, func(link) bool { return true })
	if err != nil {
		return err
	}
	nl, err := s.netlinkHandle()
	if err != nil {
		return err
	}
	defer nl.Close()
	c := &dhcpClient{
		s:       s,
		nl:      nl,
		link:    l,
		log:     supervisor.Logger(ctx),
		state:   stateInit,
		backoff: newRetryBackoff(),
	}
	defer c.stop(ctx)
	c.log.Infof("Running on %s (%s)", l.name, l.hw)
	supervisor.Signal(ctx, supervisor.SignalHealthy)
	return c.run(ctx)
}

// run is the client's state machine. It returns only when ctx is done or
// the system refuses a lease's address.
func (c *dhcpClient) run(ctx context.Context) error {
	for {
		l, err := c.acquire(ctx)
		if err != nil {
			return err
		}
		if err := c.bind(l, "ACK received"); err != nil {
			return err
		}
		reason, err := c.hold(ctx)
		if err != nil {
			return err
		}
		c.drop(reason)
		c.transition(stateInit, reason)
		// A server that hands out leases only to take them back at once
		// must not make the client spin.
		if err := sleep.For(ctx, c.backoff.NextBackOff()); err != nil {
			return err
		}
	}
}

func (c *dhcpClient) transition(to dhcpState, reason string) {
	if c.state != to {
		c.log.Infof("%s -> %s: %s", c.state, to, reason)
	}
	c.state = to
}

// modifiers are added to every request the client sends.
func (c *dhcpClient) modifiers() []dhcpv4.Modifier {
	return []dhcpv4.Modifier{
		dhcpv4.WithOption(dhcpv4.OptHostName(c.s.hostname())),
		dhcpv4.WithRequestedOptions(
			dhcpv4.OptionSubnetMask,
			dhcpv4.OptionRouter,
			dhcpv4.OptionDomainNameServer,
			dhcpv4.OptionNTPServers,
			dhcpv4.OptionIPAddressLeaseTime,
			dhcpv4.OptionRenewTimeValue,
			dhcpv4.OptionRebindingTimeValue,
		),
	}
}

// acquire runs DISCOVER-OFFER-REQUEST-ACK exchanges, with backoff between
// failed ones, until one yields a usable lease or ctx is done.
func (c *dhcpClient) acquire(ctx context.Context) (*lease, error) {
	client, err := c.broadcastClient()
	if err != nil {
		return nil, err
	}
	defer client.Close()
	for {
		sent := time.Now()
		actx, cancel := context.WithTimeout(ctx, discoverTimeout)
		raw, err := client.Request(actx, c.modifiers()...)
		cancel()
		var l *lease
		if err == nil {
			l, err = leaseFromACK(raw.Offer, raw.ACK, sent)
		}
		if err == nil {
			return l, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		wait := c.backoff.NextBackOff()
		c.log.Warningf("No lease (%v), trying again in %s", err, wait.Round(time.Millisecond))
		if err := sleep.For(ctx, wait); err != nil {
			return nil, err
		}
	}
}

// hold keeps the current lease through BOUND, RENEWING and REBINDING. It
// returns, with the reason, when the lease is lost.
func (c *dhcpClient) hold(ctx context.Context) (string, error) {
	for {
		switch c.state {
		case stateBound:
			if c.lease.infinite() {
				<-ctx.Done()
				return "", ctx.Err()
			}
			if err := sleep.For(ctx, time.Until(c.lease.t1At())); err != nil {
				return "", err
			}
			c.transition(stateRenewing, "T1 reached, renewing with "+c.lease.server.String())
		case stateRenewing, stateRebinding:
			unicast := c.state == stateRenewing
			until := c.lease.expiry()
			if unicast {
				until = c.lease.t2At()
			}
			l, err := c.extend(ctx, unicast, until)
			var nak *nclient4.ErrNak
			switch {
			case err == nil:
				c.backoff.Reset()
				if err := c.bind(l, "ACK received, lease extended"); err != nil {
					return "", err
				}
			case ctx.Err() != nil:
				return "", ctx.Err()
			case errors.As(err, &nak):
				return fmt.Sprintf("server rejected %s: %v", c.state, err), nil
			case unicast:
				c.transition(stateRebinding, fmt.Sprintf("T2 reached without renewal (%v), broadcasting", err))
			default:
				return fmt.Sprintf("lease expired without rebinding (%v)", err), nil
			}
		default:
			return "", fmt.Errorf("holding a lease in state %s", c.state)
		}
	}
}

// extend asks for the current lease to be extended, by unicast to its
// server (RENEWING) or by broadcast to any server (REBINDING), until an
// answer comes or until passes. Requests are repeated after half the time
// that is left, but not more often than every minRetransmit.
func (c *dhcpClient) extend(ctx context.Context, unicast bool, until time.Time) (*lease, error) {
	open, dest := c.broadcastClient, &net.UDPAddr{IP: net.IPv4bcast, Port: dhcpv4.ServerPort}
	if unicast {
		open = c.unicastClient
	}
	client, err := open()
	if err != nil {
		return nil, err
	}
	defer client.Close()
	if unicast {
		dest = client.RemoteAddr()
	}
	lastErr := errors.New("no answer")
	for {
		remaining := time.Until(until)
		if remaining <= 0 {
			return nil, lastErr
		}
		window := max(remaining/2, min(remaining, minRetransmit))
		sent := time.Now()
		actx, cancel := context.WithTimeout(ctx, window)
		l, err := c.requestExtension(actx, client, dest, sent)
		cancel()
		if err == nil {
			return l, nil
		}
		var nak *nclient4.ErrNak
		if errors.As(err, &nak) || ctx.Err() != nil {
			return nil, err
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			lastErr = err
		}
		if err := sleep.For(ctx, time.Until(sent.Add(window))); err != nil {
			return nil, err
		}
	}
}

// requestExtension sends one REQUEST for the current lease to dest and
// reads the answer.
func (c *dhcpClient) requestExtension(ctx context.Context, client *nclient4.Client, dest *net.UDPAddr, sent time.Time) (*lease, error) {
	req, err := dhcpv4.NewRenewFromAck(c.lease.raw.ACK, c.modifiers()...)
	if err != nil {
		return nil, fmt.Errorf("when building request: %w", err)
	}
	resp, err := client.SendAndRead(ctx, dest, req, nclient4.IsMessageType(dhcpv4.MessageTypeAck, dhcpv4.MessageTypeNak))
	if err != nil {
		return nil, err
	}
	if resp.MessageType() == dhcpv4.MessageTypeNak {
		return nil, &nclient4.ErrNak{Offer: c.lease.raw.Offer, Nak: resp}
	}
	return leaseFromACK(c.lease.raw.Offer, resp, sent)
}

// broadcastClient opens a client that exchanges DISCOVERs and rebinding
// REQUESTs over a raw socket, which works before the link has an address.
// It is open only for those exchanges: the socket receives a copy of every
// IPv4 packet of the link, which the client reads and drops, for as long
// as it is open.
func (c *dhcpClient) broadcastClient() (*nclient4.Client, error) {
	var conn net.PacketConn
	err := c.s.inNamespace(func() error {
		var err error
		conn, err = nclient4.NewRawUDPConn(c.link.name, dhcpv4.ClientPort)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("when opening DHCP socket on %s: %w", c.link.name, err)
	}
	client, err := nclient4.NewWithConn(conn, c.link.hw, nclient4.WithTimeout(firstResend), nclient4.WithRetry(sendTries))
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("when creating DHCP client: %w", err)
	}
	return client, nil
}

// unicastClient opens a client that talks to the lease's server from the
// leased address, as RENEWING does.
func (c *dhcpClient) unicastClient() (*nclient4.Client, error) {
	var conn *net.UDPConn
	err := c.s.inNamespace(func() error {
		var err error
		laddr := &net.UDPAddr{IP: c.lease.address.Addr().AsSlice(), Port: dhcpv4.ClientPort}
		conn, err = net.ListenUDP("udp4", laddr)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("when opening renewal socket: %w", err)
	}
	server := &net.UDPAddr{IP: c.lease.server.AsSlice(), Port: dhcpv4.ServerPort}
	client, err := nclient4.NewWithConn(conn, c.link.hw,
		nclient4.WithServerAddr(server), nclient4.WithTimeout(firstResend), nclient4.WithRetry(sendTries))
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("when creating renewal client: %w", err)
	}
	return client, nil
}

// bind applies l to the link, replacing what an earlier lease left there,
// and publishes its address.
func (c *dhcpClient) bind(l *lease, reason string) error {
	old := c.lease
	if old != nil && old.address != l.address {
		c.unapply(old)
	}
	if old != nil && old.address == l.address && old.router.IsValid() && old.router != l.router {
		c.removeRoute(old)
	}
	if err := setAddress(c.nl, c.link, l.address, l.lifetimeSeconds(time.Now())); err != nil {
		return err
	}
	c.lease = l
	if l.router.IsValid() {
		if err := setDefaultRoute(c.nl, c.link, l.router, unix.RTPROT_DHCP); err != nil {
			// The node is still reachable on its subnet; the next
			// renewal tries again.
			c.log.Warning(err)
		}
	}
	if old == nil || !slices.Equal(old.nameservers, l.nameservers) {
		if err := writeResolvConf(c.s.c.ResolvConfPath, l.nameservers, "DHCP on "+c.link.name); err != nil {
			c.log.Warning(err)
		}
	}
	// The NTP servers first: whoever sees the address change sees the
	// lease's servers.
	if old == nil || !slices.Equal(old.ntpServers, l.ntpServers) {
		c.s.setNTPServers(l.ntpServers)
	}
	if old == nil || old.address != l.address {
		c.s.c.ExternalAddress.Set(l.address)
	}
	c.transition(stateBound, reason)
	expiry := "never expires"
	if !l.infinite() {
		expiry = fmt.Sprintf("lease %s, T1 %s, T2 %s", l.duration, l.t1, l.t2)
	}
	c.log.Infof("Lease %s via %v from %s, nameservers %v, NTP servers %v, %s",
		l.address, l.router, l.server, l.nameservers, l.ntpServers, expiry)
	return nil
}

// drop takes the current lease's address and route off the link and
// publishes that the node has no address.
// stop ends the client. Stopped from outside (ctx done: the node shuts
// down, or the service restarts), it leaves its lease's address and route
// in place: what runs above the network is stopping at the same moment and
// still talks over them (an etcd member handing over its leadership, a
// curator resigning), and the kernel removes the address by itself when
// the lease's lifetime ends. A client that stops on an error drops its
// lease.
func (c *dhcpClient) stop(ctx context.Context) {
	if ctx.Err() != nil && c.lease != nil {
		c.log.Infof("Client stopped; %s stays until its lease ends or a new client replaces it", c.lease.address)
		return
	}
	c.drop("client stopped")
}

func (c *dhcpClient) drop(reason string) {
	if c.lease == nil {
		return
	}
	c.log.Infof("Dropping %s: %s", c.lease.address, reason)
	c.unapply(c.lease)
	c.lease = nil
	c.s.setNTPServers(nil)
	c.s.c.ExternalAddress.Set(netip.Prefix{})
}

func (c *dhcpClient) unapply(l *lease) {
	c.removeRoute(l)
	if err := removeAddress(c.nl, c.link, l.address); err != nil {
		c.log.Warning(err)
	}
}

func (c *dhcpClient) removeRoute(l *lease) {
	if !l.router.IsValid() {
		return
	}
	if err := removeDefaultRoute(c.nl, c.link, l.router, unix.RTPROT_DHCP); err != nil {
		c.log.Warning(err)
	}
}

// newRetryBackoff returns the waits between attempts to get a lease: from a
// second, doubling up to 30 seconds, each with 20% jitter either way, for
// as long as the client runs.
func newRetryBackoff() *backoff.ExponentialBackOff {
	return backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(time.Second),
		backoff.WithMultiplier(2),
		backoff.WithMaxInterval(30*time.Second),
		backoff.WithRandomizationFactor(0.2),
		backoff.WithMaxElapsedTime(0),
	)
}
