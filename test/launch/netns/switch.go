package netns

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strconv"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"cairn.dev/cairn/test/launch/l2switch"
)

// Names and addresses of a network with the harness's switch
// (Config.Switch), inside its namespace.
const (
	// SwitchTap is the tap on the bridge whose other end the switch
	// holds: the host side's port.
	SwitchTap = "sw0"
	// HostPort is the name of the switch's port on SwitchTap. Node i's
	// port is called "node<i>".
	HostPort = "host"
	// QEMUPortBase is the UDP port on the namespace's loopback that node
	// 0's qemu binds; node i's binds QEMUPortBase + i. The switch's own
	// ports take free ones, which Linux picks from 32768 up, and nothing
	// else in the namespace uses UDP but the DHCP and SNTP servers, on
	// ports 67 and 123.
	QEMUPortBase = 20000
)

var loopback = netip.MustParseAddr("127.0.0.1")

// startSwitch makes the switch with a port for the host side and one per
// node, and the tap that joins the host side's port to the bridge. It runs
// on a thread inside the namespace, where the switch's sockets and the
// tap then live.
func (n *Network) startSwitch(br netlink.Link, profile l2switch.Profile) error {
	sw, err := l2switch.New(l2switch.Config{Profile: profile, Logf: n.log})
	if err != nil {
		return err
	}
	n.sw = sw
	tap, err := openTap(SwitchTap)
	if err != nil {
		return err
	}
	if _, err := sw.AttachFrames(HostPort, tap); err != nil {
		tap.Close()
		return err
	}
	link, err := n.handle.LinkByName(SwitchTap)
	if err != nil {
		return fmt.Errorf("when finding tap %s: %w", SwitchTap, err)
	}
	if err := n.handle.LinkSetMaster(link, br); err != nil {
		return fmt.Errorf("when putting tap %s on the bridge: %w", SwitchTap, err)
	}
	if err := n.handle.LinkSetUp(link); err != nil {
		return fmt.Errorf("when bringing up tap %s: %w", SwitchTap, err)
	}
	for i := range n.nodes {
		node := &n.nodes[i]
		node.Tap = ""
		node.QEMUAddr = netip.AddrPortFrom(loopback, uint16(QEMUPortBase+i))
		p, err := sw.AttachDgram("node"+strconv.Itoa(i), netip.AddrPortFrom(loopback, 0), node.QEMUAddr)
		if err != nil {
			return err
		}
		node.SwitchAddr = p.Addr()
		n.ports = append(n.ports, p)
	}
	return nil
}

// openTap makes a tap called name, in the calling thread's namespace,
// and returns its file: each read and write one Ethernet frame, with no
// header of its own. The tap goes when the file is closed.
func openTap(name string) (*os.File, error) {
	// Non-blocking, so that the file uses Go's poller and Close ends a
	// read that waits.
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("when opening /dev/net/tun for tap %s: %w", name, err)
	}
	ifr, err := unix.NewIfreq(name)
	if err == nil {
		ifr.SetUint16(unix.IFF_TAP | unix.IFF_NO_PI)
		err = unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr)
	}
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("when making tap %s: %w", name, err)
	}
	return os.NewFile(uintptr(fd), "/dev/net/tun:"+name), nil
}

// Switch returns the network's switch, or nil when its nodes are on the
// kernel's bridge.
func (n *Network) Switch() *l2switch.Switch { return n.sw }

// Partition cuts the given nodes off from the rest of the network, the
// other nodes and the host side, as if their cables were pulled while
// their links stay up, until Heal or the next Partition. Nodes cut off
// together still reach each other. It needs the switch (Config.Switch).
func (n *Network) Partition(nodes ...int) error {
	if n.sw == nil {
		return errors.New("partition: the network has no switch (Config.Switch)")
	}
	var ports []*l2switch.Port
	for _, i := range nodes {
		if i < 0 || i >= len(n.ports) {
			return fmt.Errorf("partition: no node %d in a network of %d", i, len(n.ports))
		}
		ports = append(ports, n.ports[i])
	}
	n.sw.Partition(ports...)
	return nil
}

// Heal ends a partition: every node reaches every other and the host
// again. Without a switch it does nothing.
func (n *Network) Heal() {
	if n.sw != nil {
		n.sw.Heal()
	}
}

// SwitchPort returns node i's port on the switch, or nil without a
// switch.
func (n *Network) SwitchPort(i int) *l2switch.Port {
	if n.sw == nil {
		return nil
	}
	return n.ports[i]
}
