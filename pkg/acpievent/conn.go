package acpievent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"cairn.dev/cairn/pkg/readcancel"
)

// Conn is a netlink socket subscribed to ACPI events.
type Conn struct {
	f      *os.File
	family uint16
}

// Dial opens a netlink socket, looks up the ACPI event family and joins
// its multicast group. From then on the kernel queues events in the socket
// until Receive reads them. Dial fails if the kernel has no ACPI event
// family (no ACPI, or no networking).
func Dial() (*Conn, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.NETLINK_GENERIC)
	if err != nil {
		return nil, fmt.Errorf("when opening netlink socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("when binding netlink socket: %w", err)
	}
	// Non-blocking, the socket joins the runtime's poller, which makes
	// read deadlines work.
	c := &Conn{f: os.NewFile(uintptr(fd), "acpi_event")}
	if err := c.subscribe(); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func (c *Conn) subscribe() error {
	rc, err := c.f.SyscallConn()
	if err != nil {
		return err
	}
	var sendErr error
	err = rc.Control(func(fd uintptr) {
		sendErr = unix.Sendto(int(fd), familyRequest(familyName), 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK})
	})
	if err = errors.Join(err, sendErr); err != nil {
		return fmt.Errorf("when asking for the %s family: %w", familyName, err)
	}
	c.f.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 8192)
	n, err := c.f.Read(buf)
	if err != nil {
		return fmt.Errorf("when reading the %s family: %w", familyName, err)
	}
	c.f.SetReadDeadline(time.Time{})
	family, group, err := parseFamily(buf[:n], groupName)
	if err != nil {
		return fmt.Errorf("when looking up the %s family: %w", familyName, err)
	}
	c.family = family
	var joinErr error
	err = rc.Control(func(fd uintptr) {
		joinErr = unix.SetsockoptInt(int(fd), unix.SOL_NETLINK, unix.NETLINK_ADD_MEMBERSHIP, int(group))
	})
	if err = errors.Join(err, joinErr); err != nil {
		return fmt.Errorf("when joining %s: %w", groupName, err)
	}
	return nil
}

// Receive waits for the next datagram of ACPI events and returns them. It
// returns ctx.Err() once ctx is done, leaving c usable for another call.
// Events that arrive between calls wait in the socket.
func (c *Conn) Receive(ctx context.Context) ([]Event, error) {
	release, err := readcancel.Bind(ctx, c.f)
	if err != nil {
		return nil, fmt.Errorf("when receiving acpi events: %w", err)
	}
	defer release()
	buf := make([]byte, 8192)
	for {
		n, err := c.f.Read(buf)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if err != nil {
			return nil, fmt.Errorf("when receiving acpi events: %w", err)
		}
		events, err := parseEvents(buf[:n], c.family)
		if err != nil {
			return nil, err
		}
		if len(events) > 0 {
			return events, nil
		}
	}
}

// Close closes the socket.
func (c *Conn) Close() error {
	return c.f.Close()
}
