// Package watchdog feeds a Linux hardware watchdog (/dev/watchdog0): once
// opened, the device resets the machine unless it is fed within its
// timeout. Cairn's PID 1 feeds it (cmd/init), so that a node whose kernel
// or PID 1 hangs is reset through the firmware: during the trial of a
// system slot, that brings the last good slot back (docs/updates.md).
package watchdog

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// Device is an open, armed watchdog.
type Device struct {
	f *os.File
	// Timeout is the device's timeout in seconds, as it took it.
	Timeout int
	// Identity is the driver's name for the device ("i6300ESB timer").
	Identity string
}

// Open arms the watchdog at path with a timeout of timeout seconds (the
// device may round it) and returns it. A path that does not exist is
// os.ErrNotExist: the machine has no watchdog, or its driver is not
// loaded yet.
func Open(path string, timeout int) (*Device, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	d := &Device{f: f}
	fd := int(f.Fd())
	if info, err := unix.IoctlGetWatchdogInfo(fd); err == nil {
		d.Identity = unix.ByteSliceToString(info.Identity[:])
	}
	if err := unix.IoctlSetPointerInt(fd, unix.WDIOC_SETTIMEOUT, timeout); err != nil {
		// The device keeps its own timeout; it still resets a machine
		// that stops feeding it.
		d.Timeout = -1
	} else {
		d.Timeout = timeout
	}
	if t, err := unix.IoctlGetInt(fd, unix.WDIOC_GETTIMEOUT); err == nil {
		d.Timeout = t
	}
	if err := d.Feed(); err != nil {
		// Closed without the magic character, the device would go on
		// counting toward a reset nobody prevents.
		return nil, errors.Join(err, d.Disarm())
	}
	return d, nil
}

// Feed restarts the device's countdown.
func (d *Device) Feed() error {
	if err := unix.IoctlWatchdogKeepalive(int(d.f.Fd())); err != nil {
		return fmt.Errorf("when feeding the watchdog: %w", err)
	}
	return nil
}

// stopOnReboot is the watchdog core's parameter that says whether the
// kernel stops the devices in a reboot: 0 keeps them running, 1 stops
// them, -1 leaves it to each driver (most stop theirs).
const stopOnReboot = "/sys/module/watchdog/parameters/stop_on_reboot"

// KeptThroughReboot says whether the kernel leaves the devices running
// through a reboot, so that one that hangs on its way down is reset.
func KeptThroughReboot() bool { return keptThroughReboot(stopOnReboot) }

func keptThroughReboot(param string) bool {
	b, err := os.ReadFile(param)
	return err == nil && strings.TrimSpace(string(b)) == "0"
}

// Disarm stops the device: it writes the magic character before it
// closes it, which drivers take as a deliberate stop. A driver built to
// never stop (nowayout) keeps counting.
func (d *Device) Disarm() error {
	_, werr := d.f.Write([]byte("V"))
	return errors.Join(werr, d.f.Close())
}
