package netns

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"

	"cairn.dev/cairn/test/launch/l2switch"
)

// Fixed names and addresses inside every network's namespace. The namespace
// is private, so they never collide with the host's or another network's.
const (
	// BridgeName is the bridge that joins the nodes and the harness.
	BridgeName = "br0"
	// DefaultLeaseTime is the DHCP lease time where Config leaves it zero.
	DefaultLeaseTime = 10 * time.Minute
	// MaxNodes is the most nodes one network has room for.
	MaxNodes = 200
)

// Prefix is the subnet of every network, inside its own namespace.
var Prefix = netip.MustParsePrefix("10.42.0.0/24")

// BridgeAddr is the harness's address on the bridge: DHCP server, router
// and SNTP server handed to the nodes, and the source of forwarded
// connections.
var BridgeAddr = netip.MustParseAddr("10.42.0.1")

// nodeHostBase is the host part of the first node's address and the last
// byte of its MAC address: node 0 is 10.42.0.10, 52:54:00:42:00:0a.
const nodeHostBase = 10

// namePrefix starts the name of every namespace this package creates,
// followed by the creating process's PID and a random part.
const namePrefix = "cairn-net-"

// netnsDir is where iproute2 and vishvananda/netns keep named namespaces.
const netnsDir = "/run/netns"

// Config describes a network.
type Config struct {
	// Nodes is the number of nodes the network has a tap, a MAC address and
	// a fixed lease for, at most MaxNodes.
	Nodes int
	// LeaseTime is the lease time the DHCP server hands out; renewal is due
	// after half of it. Zero means DefaultLeaseTime.
	LeaseTime time.Duration
	// DNS are the resolvers the DHCP server hands out. Empty hands out none:
	// nothing in the network answers DNS unless a test runs a server.
	DNS []netip.Addr
	// Names, when not empty, are the host names (with their IPv4
	// addresses) of a DNS server the harness runs on BridgeAddr, which
	// the DHCP server then hands out first. It answers every other name
	// "no such name".
	Names map[string]netip.Addr
	// Switch, when not nil, joins the nodes with the harness's own switch
	// (test/launch/l2switch), which impairs every link as the profile
	// says, instead of one tap per node on the kernel's bridge: each
	// node's qemu sends its frames over UDP to a port of the switch, and
	// one tap joins the switch to the bridge, where the host side stays.
	Switch *l2switch.Profile
	// Logf receives one line for each DHCP exchange and each failed
	// forwarded connection, and the switch's errors. Nil discards them.
	// It is not called once Close has begun, so t.Logf is safe here.
	Logf func(format string, args ...any)
}

// Node is the network's side of one node: the tap or the switch port qemu
// attaches to, and the MAC address and fixed IP address the DHCP server
// knows the node by.
type Node struct {
	// Tap is the tap device's name inside the namespace; empty on a
	// network with a switch.
	Tap string
	// SwitchAddr is, on a network with a switch, the UDP address of the
	// node's switch port on the namespace's loopback, where qemu sends
	// the node's frames.
	SwitchAddr netip.AddrPort
	// QEMUAddr is, on a network with a switch, the UDP address that qemu
	// binds, where the switch sends the frames for the node.
	QEMUAddr netip.AddrPort
	// MAC is the address the node's network card must have.
	MAC net.HardwareAddr
	// IP is the address the node is leased.
	IP netip.Addr
}

// QEMUArgs returns the qemu arguments for a virtio network card with the
// node's MAC address, on the node's tap or its switch port. qemu must run
// in the network's namespace (Cmd or Do) to find either.
func (n Node) QEMUArgs() []string {
	netdev := "tap,id=net0,ifname=" + n.Tap + ",script=no,downscript=no"
	if n.SwitchAddr.IsValid() {
		netdev = fmt.Sprintf("dgram,id=net0,local.type=inet,local.host=%s,local.port=%d,remote.type=inet,remote.host=%s,remote.port=%d",
			n.QEMUAddr.Addr(), n.QEMUAddr.Port(), n.SwitchAddr.Addr(), n.SwitchAddr.Port())
	}
	return []string{
		"-netdev", netdev,
		"-device", "virtio-net-pci,netdev=net0,mac=" + n.MAC.String(),
	}
}

// Network is one namespace with its bridge, taps or switch, DHCP server
// and port forwards. Its methods are safe for concurrent use.
type Network struct {
	name      string
	nodes     []Node
	leaseTime time.Duration
	profile   *l2switch.Profile

	// sw is the switch, or nil; ports holds its port for each node.
	sw    *l2switch.Switch
	ports []*l2switch.Port

	ns     vnetns.NsHandle
	handle *netlink.Handle
	dhcp   *dhcpServer
	sntp   *sntpServer
	dns    *dnsServer
	acks   *ackLog

	logMu   sync.RWMutex
	logf    func(format string, args ...any)
	closing bool

	fwdMu      sync.Mutex
	forwarders []*forwarder

	closeOnce sync.Once
	closeErr  error
}

// New creates the namespace, its bridge and taps, and starts the DHCP and
// SNTP servers, and the DNS server when Config.Names asks for one. On error nothing is left behind. Always Close the network.
func New(cfg Config) (*Network, error) {
	if cfg.Nodes < 0 || cfg.Nodes > MaxNodes {
		return nil, fmt.Errorf("network with %d nodes: want 0 to %d", cfg.Nodes, MaxNodes)
	}
	if cfg.LeaseTime < 0 {
		return nil, fmt.Errorf("negative lease time %v", cfg.LeaseTime)
	}
	if cfg.LeaseTime == 0 {
		cfg.LeaseTime = DefaultLeaseTime
	}
	if cfg.Switch != nil {
		if err := cfg.Switch.Validate(); err != nil {
			return nil, fmt.Errorf("network switch: %w", err)
		}
	}
	sweepStale()
	suffix := make([]byte, 4)
	rand.Read(suffix)
	n := &Network{
		name:      namePrefix + strconv.Itoa(os.Getpid()) + "-" + hex.EncodeToString(suffix),
		nodes:     nodesFor(cfg.Nodes),
		leaseTime: cfg.LeaseTime,
		profile:   cfg.Switch,
		ns:        -1,
		acks:      newAckLog(),
		logf:      cfg.Logf,
	}
	if err := n.create(); err != nil {
		n.Close()
		return nil, err
	}
	if len(cfg.Names) > 0 {
		cfg.DNS = append([]netip.Addr{BridgeAddr}, cfg.DNS...)
		var err error
		if n.dns, err = n.startDNS(cfg.Names); err != nil {
			n.Close()
			return nil, err
		}
	}
	dhcp, err := n.startDHCP(cfg)
	if err != nil {
		n.Close()
		return nil, err
	}
	n.dhcp = dhcp
	if n.sntp, err = n.startSNTP(); err != nil {
		n.Close()
		return nil, err
	}
	return n, nil
}

// NewForTest is New that fails t on error and closes the network in
// t.Cleanup, also when the test fails or panics.
func NewForTest(t testing.TB, cfg Config) *Network {
	t.Helper()
	n, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		if err := n.Close(); err != nil {
			t.Errorf("closing network %s: %v", n.name, err)
		}
	})
	return n
}

// nodesFor returns the taps, MAC and IP addresses of count nodes.
func nodesFor(count int) []Node {
	nodes := make([]Node, count)
	base := BridgeAddr.As4()
	for i := range nodes {
		host := byte(nodeHostBase + i)
		ip := base
		ip[3] = host
		nodes[i] = Node{
			Tap: "tap" + strconv.Itoa(i),
			MAC: net.HardwareAddr{0x52, 0x54, 0x00, 0x42, 0x00, host},
			IP:  netip.AddrFrom4(ip),
		}
	}
	return nodes
}

// Name returns the name of the network's namespace (for ip netns).
func (n *Network) Name() string { return n.name }

// Path returns the file that names the network's namespace, for
// nsenter --net or setns(2).
func (n *Network) Path() string { return filepath.Join(netnsDir, n.name) }

// Nodes returns the nodes of the network, in order.
func (n *Network) Nodes() []Node { return append([]Node(nil), n.nodes...) }

// Node returns node i, counting from 0. It panics if there is no such node.
func (n *Network) Node(i int) Node { return n.nodes[i] }

// LeaseTime returns the lease time the DHCP server hands out.
func (n *Network) LeaseTime() time.Duration { return n.leaseTime }

// create makes the namespace and the links inside it.
func (n *Network) create() error {
	return onLockedThread(func() error {
		// NewNamed moves this thread into the new namespace;
		// onLockedThread moves it back.
		ns, err := vnetns.NewNamed(n.name)
		if err != nil {
			return fmt.Errorf("when creating namespace %s: %w", n.name, err)
		}
		n.ns = ns
		// Taps are made through /dev/net/tun, in the namespace of the
		// calling thread: this one.
		return n.createLinks()
	})
}

// createLinks brings up loopback and makes the bridge and the nodes' taps,
// or the switch. It runs on a thread inside the namespace.
func (n *Network) createLinks() error {
	h, err := netlink.NewHandleAt(n.ns)
	if err != nil {
		return fmt.Errorf("when opening netlink in namespace: %w", err)
	}
	n.handle = h
	lo, err := h.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("when finding loopback: %w", err)
	}
	if err := h.LinkSetUp(lo); err != nil {
		return fmt.Errorf("when bringing up loopback: %w", err)
	}
	br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{
		Name:         BridgeName,
		HardwareAddr: net.HardwareAddr{0x52, 0x54, 0x00, 0x42, 0x00, 0x01},
	}}
	if err := h.LinkAdd(br); err != nil {
		return fmt.Errorf("when adding bridge: %w", err)
	}
	addr := &netlink.Addr{IPNet: &net.IPNet{
		IP:   BridgeAddr.AsSlice(),
		Mask: net.CIDRMask(Prefix.Bits(), 32),
	}}
	if err := h.AddrAdd(br, addr); err != nil {
		return fmt.Errorf("when addressing bridge: %w", err)
	}
	if err := h.LinkSetUp(br); err != nil {
		return fmt.Errorf("when bringing up bridge: %w", err)
	}
	if n.profile != nil {
		return n.startSwitch(br, *n.profile)
	}
	for _, node := range n.nodes {
		if err := n.addTap(br, node.Tap); err != nil {
			return err
		}
	}
	return nil
}

// addTap makes a persistent tap owned by this process's user and group, so
// that qemu running as them can attach to it, and puts it on the bridge.
func (n *Network) addTap(br *netlink.Bridge, name string) error {
	tap := &netlink.Tuntap{
		LinkAttrs: netlink.LinkAttrs{Name: name, MasterIndex: br.Index},
		Mode:      netlink.TUNTAP_MODE_TAP,
		Flags:     netlink.TUNTAP_NO_PI | netlink.TUNTAP_ONE_QUEUE,
		Owner:     uint32(os.Getuid()),
		Group:     uint32(os.Getgid()),
	}
	err := n.handle.LinkAdd(tap)
	// The tap persists without the file that made it.
	for _, f := range tap.Fds {
		f.Close()
	}
	if err != nil {
		return fmt.Errorf("when adding tap %s: %w", name, err)
	}
	if err := n.handle.LinkSetUp(tap); err != nil {
		return fmt.Errorf("when bringing up tap %s: %w", name, err)
	}
	return nil
}

// Cmd returns a command that runs name with args inside the network's
// namespace (through nsenter), with the host's mount namespace and
// everything else: the way to start qemu on a tap of the network.
func (n *Network) Cmd(name string, args ...string) *exec.Cmd {
	return exec.Command("nsenter", append([]string{"--net=" + n.Path(), "--", name}, args...)...)
}

// Do runs f on a thread inside the network's namespace and returns its
// error. Sockets f makes stay in the namespace for their whole life, and
// processes f starts run in it. Goroutines f starts do not: they run on
// other threads. A panic in f is raised again in the caller.
func (n *Network) Do(f func() error) error {
	return doIn(n.ns, f)
}

// doIn runs f on a locked thread inside namespace ns.
func doIn(ns vnetns.NsHandle, f func() error) error {
	return onLockedThread(func() error {
		if err := vnetns.Set(ns); err != nil {
			return fmt.Errorf("when entering namespace: %w", err)
		}
		return f()
	})
}

// onLockedThread runs f on a fresh goroutine locked to its thread, and
// moves the thread back to this process's network namespace afterwards.
// When that fails the goroutine ends still locked, and Go ends the thread
// with it instead of reusing it elsewhere. A panic in f is raised again
// here.
func onLockedThread(f func() error) error {
	type result struct {
		err   error
		panic any
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		var r result
		// The namespace to return to is this thread's own. Not
		// /proc/self/ns/net: that is the main thread's, and the main
		// thread may be the one another call of onLockedThread has
		// moved into a network's namespace right now, which would
		// strand this thread there for good.
		host, err := vnetns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			done <- result{err: fmt.Errorf("when opening own namespace: %w", err)}
			return
		}
		defer host.Close()
		func() {
			defer func() { r.panic = recover() }()
			r.err = f()
		}()
		if err := vnetns.Set(host); err != nil {
			// Stay locked: the thread dies with this goroutine.
			r.err = errors.Join(r.err, fmt.Errorf("when leaving namespace: %w", err))
			done <- r
			return
		}
		runtime.UnlockOSThread()
		done <- r
	}()
	r := <-done
	if r.panic != nil {
		panic(r.panic)
	}
	return r.err
}

// Close stops the forwards and the DHCP and SNTP servers and removes the
// taps, the bridge and the namespace. Nodes (qemu processes) still
// running in the namespace keep it alive until they exit, so close them
// first. Close is safe to call more than once and concurrently; every
// call returns the first call's result.
func (n *Network) Close() error {
	n.closeOnce.Do(func() { n.closeErr = n.close() })
	return n.closeErr
}

func (n *Network) close() error {
	n.logMu.Lock()
	n.closing = true
	n.logMu.Unlock()

	var errs []error
	n.fwdMu.Lock()
	fwds := n.forwarders
	n.forwarders = nil
	n.fwdMu.Unlock()
	for _, f := range fwds {
		f.close()
	}
	if n.dhcp != nil {
		if err := n.dhcp.close(); err != nil {
			errs = append(errs, err)
		}
	}
	if n.sntp != nil {
		if err := n.sntp.close(); err != nil {
			errs = append(errs, err)
		}
	}
	if n.dns != nil {
		if err := n.dns.close(); err != nil {
			errs = append(errs, err)
		}
	}
	if n.sw != nil {
		// Its tap goes with it.
		if err := n.sw.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	if n.handle != nil {
		errs = append(errs, n.deleteLinks()...)
		n.handle.Close()
	}
	if n.ns != -1 {
		n.ns.Close()
		if err := vnetns.DeleteNamed(n.name); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("when deleting namespace %s: %w", n.name, err))
		}
	}
	return errors.Join(errs...)
}

// deleteLinks removes the taps and the bridge. Removing the namespace would
// take them along, but only once nothing holds it any more; deleting them
// here cuts any node still running off at once.
func (n *Network) deleteLinks() []error {
	var errs []error
	links, err := n.handle.LinkList()
	if err != nil {
		return []error{fmt.Errorf("when listing links: %w", err)}
	}
	for _, l := range links {
		if l.Attrs().Name == "lo" {
			continue
		}
		err := n.handle.LinkDel(l)
		if err != nil && !errors.Is(err, syscall.ENODEV) {
			errs = append(errs, fmt.Errorf("when deleting link %s: %w", l.Attrs().Name, err))
		}
	}
	return errs
}

// log calls Config.Logf unless Close has begun.
func (n *Network) log(format string, args ...any) {
	n.logMu.RLock()
	defer n.logMu.RUnlock()
	if n.logf != nil && !n.closing {
		n.logf(format, args...)
	}
}

// sweepStale deletes the namespaces of this package whose creating process
// is dead: they were left by a test that was killed before it could clean
// up.
func sweepStale() {
	entries, err := os.ReadDir(netnsDir)
	if err != nil {
		return
	}
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), namePrefix)
		if !ok {
			continue
		}
		pidStr, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidStr)
		if err != nil || pid <= 0 {
			continue
		}
		if errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
			vnetns.DeleteNamed(e.Name())
		}
	}
}
