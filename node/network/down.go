package network

import (
	"errors"
	"fmt"
	"net"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// TakeLinksDown sets every link but loopback administratively down, and
// returns the names of those it took down. PID 1 calls it after every
// process has ended, before it has the kernel reboot or power off: the
// kernel's shutdown of each device runs while the network stack may still
// be sending or polling on it, and virtio's (which breaks and resets
// every device, backported to Debian's 6.1) can leave virtio_net's
// polling looping for good on a queue it reset, a soft lockup that hangs
// the reboot. A link that is down has its polling stopped and takes no
// packets first, as when its driver is removed.
func TakeLinksDown() ([]string, error) {
	nl, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("when opening netlink handle: %w", err)
	}
	defer nl.Close()
	return takeLinksDown(nl)
}

func takeLinksDown(nl *netlink.Handle) ([]string, error) {
	links, err := nl.LinkList()
	if err != nil {
		return nil, fmt.Errorf("when listing links: %w", err)
	}
	var down []string
	var errs []error
	for _, l := range links {
		a := l.Attrs()
		if a.Flags&net.FlagLoopback != 0 || a.Flags&net.FlagUp == 0 {
			continue
		}
		if err := nl.LinkSetDown(l); err != nil {
			errs = append(errs, fmt.Errorf("when setting link %s down: %w", a.Name, err))
			continue
		}
		down = append(down, a.Name)
	}
	return down, errors.Join(errs...)
}
