package network

import (
	"context"
	"fmt"
	"net/netip"
	"runtime"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"cairn.dev/cairn/pkg/event"
	"cairn.dev/cairn/pkg/event/memory"
	"cairn.dev/cairn/pkg/supervisor"
	"cairn.dev/cairn/proto/api"
)

// DefaultHostname is the hostname of a node whose Config names no node ID.
const DefaultHostname = "cairn"

const (
	defaultResolvConfPath = "/etc/resolv.conf"
	// Writing this file sets the kernel's hostname, like sethostname(2).
	defaultHostnamePath = "/proc/sys/kernel/hostname"
)

// Config is what the network service needs. The zero value of every field
// but ExternalAddress is usable.
type Config struct {
	// NetworkConfig is the operator's network configuration from the node
	// parameters. Nil, or a DHCP method, means DHCPv4 on the first Ethernet
	// link with carrier; a static method configures one link as given.
	NetworkConfig *api.NetworkConfig
	// NodeID becomes the hostname and is sent to the DHCP server as the
	// host name option. Empty means DefaultHostname.
	NodeID string
	// ExternalAddress is where the service publishes the node's current
	// external address with its prefix length. The zero netip.Prefix (not
	// IsValid) means the node has none, for example after a DHCP lease was
	// lost. Required.
	ExternalAddress event.Value[netip.Prefix]
	// NTPServers is where the service publishes the NTP servers that the
	// network names, most preferred first: those of the DHCP lease
	// (option 42), none without a lease or with a static configuration.
	// Nil means nobody follows them.
	NTPServers event.Value[[]netip.Addr]
	// ResolvConfPath is the file the DNS resolvers are written to. Empty
	// means /etc/resolv.conf.
	ResolvConfPath string
	// HostnamePath is the file the hostname is written to. Empty means
	// /proc/sys/kernel/hostname, which sets the kernel's hostname.
	HostnamePath string
	// Namespace is the network namespace the service configures: netlink
	// calls and the sockets of the DHCP client are made in it. A handle
	// that is not positive (zero, or netns.None()) means the namespace of
	// the process. The service does not close it.
	Namespace netns.NsHandle
}

// Service configures the node's network as its Config says. Create it with
// New and run Run under the supervisor.
type Service struct {
	c Config
	// carrier holds the Ethernet links that have carrier, lowest index
	// first. The links worker sets it; the DHCP and static workers wait
	// on it.
	carrier memory.Value[[]link]
}

// New returns a Service for c. It does nothing until Run.
func New(c Config) *Service {
	if c.ResolvConfPath == "" {
		c.ResolvConfPath = defaultResolvConfPath
	}
	if c.HostnamePath == "" {
		c.HostnamePath = defaultHostnamePath
	}
	return &Service{c: c}
}

// setNTPServers publishes servers, if anyone follows them. The slice is
// shared with the readers and never changed after.
func (s *Service) setNTPServers(servers []netip.Addr) {
	if s.c.NTPServers != nil {
		s.c.NTPServers.Set(servers)
	}
}

// hostname is the name the node goes by.
func (s *Service) hostname() string {
	if s.c.NodeID != "" {
		return s.c.NodeID
	}
	return DefaultHostname
}

// Run brings the network up and keeps it configured until ctx is done. It
// is a supervisor.Runnable; its workers run as its children: "links"
// always, and either "dhcp" or "static".
func (s *Service) Run(ctx context.Context) error {
	if s.c.ExternalAddress == nil {
		return fmt.Errorf("config has no ExternalAddress value")
	}
	static, err := s.staticConfig()
	if err != nil {
		return err
	}
	if err := writeHostname(s.c.HostnamePath, s.hostname()); err != nil {
		return err
	}
	supervisor.Logger(ctx).Infof("Hostname set to %q", s.hostname())
	if err := s.setSysctls(); err != nil {
		return err
	}

	if err := supervisor.Run(ctx, "links", s.runLinks); err != nil {
		return fmt.Errorf("when starting links worker: %w", err)
	}
	if static != nil {
		err = supervisor.Run(ctx, "static", func(ctx context.Context) error {
			return s.runStatic(ctx, static)
		})
	} else {
		err = supervisor.Run(ctx, "dhcp", s.runDHCP)
	}
	if err != nil {
		return fmt.Errorf("when starting address worker: %w", err)
	}
	supervisor.Signal(ctx, supervisor.SignalHealthy)
	<-ctx.Done()
	return ctx.Err()
}

// netlinkHandle opens a netlink handle in the configured namespace, for
// NETLINK_ROUTE only: links, addresses and routes are all the service
// touches, and a handle for every family would need kernel modules (xfrm,
// nfnetlink) the node has no other use for. Each worker has its own, closed
// when it returns: a worker may still be cleaning up after its parent has
// returned.
func (s *Service) netlinkHandle() (*netlink.Handle, error) {
	var nl *netlink.Handle
	var err error
	if s.c.Namespace > 0 {
		nl, err = netlink.NewHandleAt(s.c.Namespace, unix.NETLINK_ROUTE)
	} else {
		nl, err = netlink.NewHandle(unix.NETLINK_ROUTE)
	}
	if err != nil {
		return nil, fmt.Errorf("when opening netlink handle: %w", err)
	}
	return nl, nil
}

// inNamespace calls f on a thread in the configured network namespace, so
// that the sockets f opens live there. Sockets stay in the namespace they
// were made in, whichever thread uses them later.
func (s *Service) inNamespace(f func() error) error {
	if s.c.Namespace <= 0 {
		return f()
	}
	return inNamespace(s.c.Namespace, f)
}

// inNamespace calls f on the calling goroutine's thread, switched into ns
// for the duration of the call.
func inNamespace(ns netns.NsHandle, f func() error) error {
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("when getting current network namespace: %w", err)
	}
	defer orig.Close()
	if err := netns.Set(ns); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("when entering network namespace: %w", err)
	}
	ferr := f()
	if err := netns.Set(orig); err != nil {
		// The thread stays locked to this goroutine and is thrown away
		// when it exits: no other goroutine may run in the wrong
		// namespace.
		return fmt.Errorf("when leaving network namespace: %w", err)
	}
	runtime.UnlockOSThread()
	return ferr
}
