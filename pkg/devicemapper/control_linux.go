package devicemapper

import (
	"errors"
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ControlPath is where the kernel's device-mapper control node lives.
const ControlPath = "/dev/mapper/control"

// Command numbers of the version-4 interface, in the order of the kernel's
// enum; each is sent as _IOWR(0xfd, nr, struct dm_ioctl).
const (
	cmdVersion      = 0
	cmdListDevices  = 2
	cmdDevCreate    = 3
	cmdDevRemove    = 4
	cmdDevSuspend   = 6
	cmdDevStatus    = 7
	cmdTableLoad    = 9
	cmdTableStatus  = 12
	ioctlMagic      = 0xfd
	replyBufferSize = 16 << 10
	maxBufferSize   = 16 << 20
)

var cmdNames = map[uint]string{
	cmdVersion: "DM_VERSION", cmdListDevices: "DM_LIST_DEVICES",
	cmdDevCreate: "DM_DEV_CREATE", cmdDevRemove: "DM_DEV_REMOVE",
	cmdDevSuspend: "DM_DEV_SUSPEND", cmdDevStatus: "DM_DEV_STATUS",
	cmdTableLoad: "DM_TABLE_LOAD", cmdTableStatus: "DM_TABLE_STATUS",
}

// ioctlNumber is _IOWR(0xfd, nr, struct dm_ioctl): direction bits 3 (read
// and write), the argument size, the magic and the command number.
func ioctlNumber(nr uint) uint {
	return 3<<30 | HeaderSize<<16 | ioctlMagic<<8 | nr
}

// Control is an open /dev/mapper/control. Its methods are safe for
// concurrent use: each call is one self-contained ioctl.
type Control struct {
	f *os.File
}

// Open opens the device-mapper control node at ControlPath.
func Open() (*Control, error) { return OpenPath(ControlPath) }

// OpenPath opens a device-mapper control node at path.
func OpenPath(path string) (*Control, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("when opening device-mapper control: %w", err)
	}
	return &Control{f: f}, nil
}

// Close closes the control node.
func (c *Control) Close() error { return c.f.Close() }

// call sends one command. The buffer holds the header, then payload, and
// at least reply bytes in all; when the kernel reports the buffer full,
// call retries with a larger one. With secure set, the kernel wipes its
// copies; a request buffer is wiped here, a reply is the caller's to wipe.
func (c *Control) call(nr uint, h header, payload []byte, reply int, secure bool) (header, []byte, error) {
	size := max(HeaderSize+len(payload), reply)
	for {
		buf := make([]byte, size)
		h.Version = [3]uint32{versionMajor, versionMinor, versionPatch}
		h.DataSize = uint32(size)
		h.DataStart = HeaderSize
		if secure {
			h.Flags |= flagSecureData
		}
		if err := h.marshal(buf); err != nil {
			return header{}, nil, err
		}
		copy(buf[HeaderSize:], payload)
		err := c.ioctl(nr, buf)
		if secure && reply == 0 {
			clear(buf[HeaderSize:])
		}
		if err != nil {
			return header{}, nil, fmt.Errorf("%s %q: %w", cmdNames[nr], h.Name, err)
		}
		out, err := unmarshalHeader(buf)
		if err != nil {
			return header{}, nil, err
		}
		if out.Flags&flagBufferFull != 0 && reply > 0 {
			if size >= maxBufferSize {
				return header{}, nil, fmt.Errorf("%s %q: reply larger than %d bytes", cmdNames[nr], h.Name, maxBufferSize)
			}
			size *= 4
			continue
		}
		return out, buf, nil
	}
}

func (c *Control) ioctl(nr uint, buf []byte) error {
	conn, err := c.f.SyscallConn()
	if err != nil {
		return err
	}
	var errno unix.Errno
	err = conn.Control(func(fd uintptr) {
		_, _, errno = unix.Syscall(unix.SYS_IOCTL, fd, uintptr(ioctlNumber(nr)), uintptr(unsafe.Pointer(&buf[0])))
	})
	if err != nil {
		return err
	}
	if errno != 0 {
		return errno
	}
	return nil
}

// Version returns the kernel's device-mapper interface version. It fails
// when the kernel's major version differs from the one this package
// speaks.
func (c *Control) Version() ([3]uint32, error) {
	h, _, err := c.call(cmdVersion, header{}, nil, 0, false)
	if err != nil {
		return [3]uint32{}, err
	}
	if h.Version[0] != versionMajor {
		return h.Version, fmt.Errorf("kernel speaks device-mapper %d.%d.%d, want major %d",
			h.Version[0], h.Version[1], h.Version[2], versionMajor)
	}
	return h.Version, nil
}

// Create creates a mapped device without a table and returns its device
// number (see unix.Major, unix.Minor). uuid may be empty.
func (c *Control) Create(name, uuid string) (uint64, error) {
	if name == "" {
		return 0, errors.New("device name is empty")
	}
	h, _, err := c.call(cmdDevCreate, header{Name: name, UUID: uuid}, nil, 0, false)
	if err != nil {
		return 0, err
	}
	return h.Dev, nil
}

// LoadTable loads targets as the inactive table of the named device. The
// parameters go to the kernel with the secure-data flag, so it wipes its
// copies; Resume makes the table live.
func (c *Control) LoadTable(name string, targets []Target) error {
	payload, err := encodeTargets(targets)
	if err != nil {
		return fmt.Errorf("when loading the table of %q: %w", name, err)
	}
	defer clear(payload)
	return c.loadPayload(name, uint32(len(targets)), payload, 0)
}

// loadPayload loads an encoded table; flags may hold flagReadOnly.
func (c *Control) loadPayload(name string, count uint32, payload []byte, flags uint32) error {
	_, _, err := c.call(cmdTableLoad, header{Name: name, TargetCount: count, Flags: flags}, payload, 0, true)
	return err
}

// createLoaded creates the device name with the one-target table payload,
// loaded with flags (flagReadOnly or 0), and resumes it. When a step
// fails the half-made device is removed again, so that a retry starts
// from nothing.
func (c *Control) createLoaded(name string, payload []byte, flags uint32) (dev uint64, err error) {
	if dev, err = c.Create(name, ""); err != nil {
		return 0, err
	}
	defer func() {
		if err != nil {
			if rerr := c.Remove(name); rerr != nil {
				err = errors.Join(err, fmt.Errorf("when removing the half-made device: %w", rerr))
			}
		}
	}()
	if err = c.loadPayload(name, 1, payload, flags); err != nil {
		return 0, err
	}
	if err = c.Resume(name); err != nil {
		return 0, err
	}
	return dev, nil
}

// Resume activates the named device: its inactive table becomes live and
// queued I/O proceeds.
func (c *Control) Resume(name string) error {
	_, _, err := c.call(cmdDevSuspend, header{Name: name}, nil, 0, false)
	return err
}

// Suspend stops I/O to the named device, flushing what is in flight.
func (c *Control) Suspend(name string) error {
	_, _, err := c.call(cmdDevSuspend, header{Name: name, Flags: flagSuspend}, nil, 0, false)
	return err
}

// Remove removes the named device. It fails with EBUSY while the device
// is open (mounted, for instance).
func (c *Control) Remove(name string) error {
	_, _, err := c.call(cmdDevRemove, header{Name: name}, nil, 0, false)
	return err
}

// Info is what the kernel says about one mapped device.
type Info struct {
	// Name is the device's name.
	Name string
	// UUID is the device's uuid, empty when it has none.
	UUID string
	// Dev is the device number (unix.Major, unix.Minor decode it).
	Dev uint64
	// OpenCount is how many holders have the device open.
	OpenCount int32
	// TargetCount is the number of targets in its live table.
	TargetCount uint32
	// Suspended is true while I/O to the device is held back.
	Suspended bool
	// ReadOnly is true for read-only devices.
	ReadOnly bool
	// LiveTable and InactiveTable say which tables are loaded.
	LiveTable, InactiveTable bool
}

func infoOf(h header) Info {
	return Info{
		Name: h.Name, UUID: h.UUID, Dev: h.Dev, OpenCount: h.OpenCount,
		TargetCount: h.TargetCount,
		Suspended:   h.Flags&flagSuspend != 0,
		ReadOnly:    h.Flags&flagReadOnly != 0,
		LiveTable:   h.Flags&flagActivePresent != 0, InactiveTable: h.Flags&flagInactivePresent != 0,
	}
}

// Info returns the state of the named device. Its error wraps unix.ENXIO
// when there is no such device.
func (c *Control) Info(name string) (Info, error) {
	h, _, err := c.call(cmdDevStatus, header{Name: name}, nil, 0, false)
	if err != nil {
		return Info{}, err
	}
	return infoOf(h), nil
}

// Status returns the live table's targets with each target's status line
// in Params (for crypt: no key).
func (c *Control) Status(name string) ([]Target, error) {
	return c.tableStatus(name, 0)
}

// Table returns the live table's targets with their table parameters.
// For crypt targets Params then holds the key: never log the result.
func (c *Control) Table(name string) ([]Target, error) {
	return c.tableStatus(name, flagStatusTable)
}

func (c *Control) tableStatus(name string, flags uint32) ([]Target, error) {
	h, buf, err := c.call(cmdTableStatus, header{Name: name, Flags: flags}, nil, replyBufferSize, flags != 0)
	if err != nil {
		return nil, err
	}
	defer clear(buf)
	data, err := h.payload(buf)
	if err != nil {
		return nil, err
	}
	return parseTargets(data, h.TargetCount)
}

// List returns every mapped device.
func (c *Control) List() ([]Device, error) {
	h, buf, err := c.call(cmdListDevices, header{}, nil, replyBufferSize, false)
	if err != nil {
		return nil, err
	}
	data, err := h.payload(buf)
	if err != nil {
		return nil, err
	}
	return parseNameList(data)
}
