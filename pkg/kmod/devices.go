package kmod

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"cairn.dev/cairn/pkg/readcancel"
)

// Devices keeps the modaliases of the devices the kernel has found, for
// Coldplug. Walking sysfs for them costs a tenth of a second and more
// under software emulation, and Coldplug needs them again after every
// round of loads, since drivers bring devices of their own. So Devices
// made by WatchDevices walks sysfs once and from then on reads the
// kernel's uevents, which carry the modalias of every device added.
// Devices made by ScanDevices walks sysfs every time it is asked.
//
// It is safe for concurrent use.
type Devices struct {
	dir    string
	events eventSource // nil: walk sysfs at every call

	mu sync.Mutex
	// set holds every modalias seen so far: nil until a walk filled it,
	// then events add to it.
	set map[string]bool
	// scans and scanning say how often sysfs was walked and for how
	// long; fromEvents counts the device additions read from uevents.
	scans      int
	scanning   time.Duration
	fromEvents int
}

// eventSource yields the modaliases of the devices added since its last
// call. complete is false when events were lost (the socket's buffer
// overflowed): the caller must walk sysfs again.
type eventSource interface {
	added() (modaliases []string, complete bool, err error)
	// wait returns once an event is queued or ctx is done, without
	// reading the event.
	wait(ctx context.Context) error
	close() error
}

// ScanDevices returns Devices that walks sysDevices (normally
// /sys/devices) every time it is asked.
func ScanDevices(sysDevices string) *Devices {
	return &Devices{dir: sysDevices}
}

// WatchDevices returns Devices that walks sysDevices once and then follows
// the kernel's uevents. It starts listening before it walks, so that no
// device added in between is missed. Where the uevent socket cannot be
// opened, it falls back on walking sysfs every time, and says why in the
// error, which is only a warning: the Devices it returns works either way.
func WatchDevices(sysDevices string) (*Devices, error) {
	d := &Devices{dir: sysDevices}
	src, err := openUevents()
	if err != nil {
		return d, fmt.Errorf("when listening for uevents (walking sysfs at every round instead): %w", err)
	}
	d.events = src
	return d, nil
}

// Modaliases returns every modalias seen so far, sorted: a walk of sysfs
// the first time, and after that the devices the uevents added, or a new
// walk when there are no uevents or some were lost.
func (d *Devices) Modaliases() ([]string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	rescan := d.set == nil || d.events == nil
	if !rescan {
		added, complete, err := d.events.added()
		if err != nil {
			return nil, err
		}
		for _, a := range added {
			d.set[a] = true
		}
		d.fromEvents += len(added)
		rescan = !complete
	}
	if rescan {
		start := time.Now()
		found, err := ScanModaliases(d.dir)
		d.scans++
		d.scanning += time.Since(start)
		if err != nil {
			return nil, err
		}
		if d.set == nil {
			d.set = make(map[string]bool, len(found))
		}
		for _, a := range found {
			d.set[a] = true
		}
	}
	return slices.Sorted(maps.Keys(d.set)), nil
}

// Known returns every modalias seen so far, sorted, without reading the
// uevents queued since: the devices a coldplug that just returned has
// served, where Modaliases would take in devices added since.
func (d *Devices) Known() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Sorted(maps.Keys(d.set))
}

// Wait returns once the kernel has sent a uevent that Modaliases has not
// read yet (of any device, with a modalias or not), or ctx is done. It
// blocks without polling. Devices that walks sysfs at every call has
// nothing to wait on, and says so.
func (d *Devices) Wait(ctx context.Context) error {
	d.mu.Lock()
	src := d.events
	d.mu.Unlock()
	if src == nil {
		return errors.New("when waiting for devices: not following uevents")
	}
	if err := src.wait(ctx); err != nil {
		return fmt.Errorf("when waiting for devices: %w", err)
	}
	return nil
}

// Stats says how often sysfs was walked, for how long in all (wall time),
// and how many device additions came from uevents instead.
func (d *Devices) Stats() (scans int, scanning time.Duration, events int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.scans, d.scanning, d.fromEvents
}

// Close stops listening for uevents.
func (d *Devices) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.events == nil {
		return nil
	}
	err := d.events.close()
	d.events = nil
	return err
}

// ueventBuffer is the receive buffer asked for the uevent socket: loading
// a disk driver adds dozens of kernel objects, each announced in a few
// hundred bytes, and the socket is read only between rounds of loads.
const ueventBuffer = 4 << 20

// uevents is the kernel's uevent socket (NETLINK_KOBJECT_UEVENT, group 1,
// which only the kernel sends to), read without blocking. It is a file of
// Go's poller, so that wait blocks no thread.
type uevents struct {
	f   *os.File
	raw syscall.RawConn
	buf []byte
}

func openUevents() (*uevents, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.NETLINK_KOBJECT_UEVENT)
	if err != nil {
		return nil, fmt.Errorf("when opening the uevent socket: %w", err)
	}
	// The forced size ignores rmem_max, and needs CAP_NET_ADMIN; without
	// it the default buffer still serves, and an overflow means a walk.
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, ueventBuffer) != nil {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, ueventBuffer)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: 1}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("when joining the kernel's uevent group: %w", err)
	}
	// A non-blocking descriptor becomes a file of the poller.
	f := os.NewFile(uintptr(fd), "uevents")
	raw, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("when polling the uevent socket: %w", err)
	}
	return &uevents{f: f, raw: raw, buf: make([]byte, 64<<10)}, nil
}

func (u *uevents) added() ([]string, bool, error) {
	var (
		found    []string
		complete = true
		readErr  error
	)
	err := u.raw.Control(func(fd uintptr) {
		found, complete, readErr = u.read(int(fd))
	})
	if err == nil {
		err = readErr
	}
	if err != nil {
		return nil, false, fmt.Errorf("when reading uevents: %w", err)
	}
	return found, complete, nil
}

// read takes every uevent queued on the socket fd.
func (u *uevents) read(fd int) ([]string, bool, error) {
	var found []string
	complete := true
	for {
		n, from, err := unix.Recvfrom(fd, u.buf, unix.MSG_DONTWAIT)
		switch {
		case errors.Is(err, unix.EAGAIN):
			return found, complete, nil
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.ENOBUFS):
			// The kernel dropped events: what is queued after this
			// is still read, but only a walk finds what was lost.
			complete = false
			continue
		case err != nil:
			return nil, false, err
		}
		if nl, ok := from.(*unix.SockaddrNetlink); !ok || nl.Pid != 0 {
			continue // only the kernel's own messages
		}
		if a, ok := parseUevent(u.buf[:n]); ok {
			found = append(found, a)
		}
	}
}

// wait peeks at the socket until a message (or a loss) is queued; the
// poller parks it in between. ctx's end sets a read deadline in the past
// (readcancel), which ends the wait and leaves the socket to a later run
// of Hotplug.
func (u *uevents) wait(ctx context.Context) error {
	release, err := readcancel.Bind(ctx, u.f)
	if err != nil {
		return err
	}
	defer release()
	var peek [1]byte
	err = u.raw.Read(func(fd uintptr) bool {
		for {
			_, _, err := unix.Recvfrom(int(fd), peek[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
			if !errors.Is(err, unix.EINTR) {
				// Anything but an empty queue is for added to read:
				// a message, a loss, a failure.
				return !errors.Is(err, unix.EAGAIN)
			}
		}
	})
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

func (u *uevents) close() error { return u.f.Close() }

// parseUevent returns the modalias of a kernel uevent that announces a
// device added with one. A uevent is "<action>@<devpath>" followed by
// KEY=value fields, each ended by a NUL byte.
func parseUevent(msg []byte) (string, bool) {
	var action, modalias []byte
	for i, field := range bytes.Split(msg, []byte{0}) {
		if i == 0 {
			continue // the header repeats ACTION and DEVPATH
		}
		if v, ok := bytes.CutPrefix(field, []byte("ACTION=")); ok {
			action = v
		} else if v, ok := bytes.CutPrefix(field, []byte("MODALIAS=")); ok {
			modalias = v
		}
	}
	if string(action) != "add" || len(modalias) == 0 {
		return "", false
	}
	return string(modalias), true
}
