package devicemapper

import (
	"errors"
	"os"
	"testing"
)

func TestIoctlNumbers(t *testing.T) {
	// _IOWR(0xfd, nr, struct dm_ioctl) with sizeof 312 = 0x138.
	for nr, want := range map[uint]uint{
		cmdVersion:     0xc138fd00,
		cmdDevCreate:   0xc138fd03,
		cmdDevSuspend:  0xc138fd06,
		cmdTableLoad:   0xc138fd09,
		cmdTableStatus: 0xc138fd0c,
	} {
		if got := ioctlNumber(nr); got != want {
			t.Errorf("ioctlNumber(%s) = %#x, want %#x", cmdNames[nr], got, want)
		}
	}
}

// TestKernel talks to the running kernel's device-mapper. Creating real
// crypt devices is left to the qemu tests, which own their kernel.
func TestKernel(t *testing.T) {
	if _, err := os.Stat(ControlPath); errors.Is(err, os.ErrNotExist) {
		t.Skip("/dev/mapper/control is absent")
	}
	c, err := Open()
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer c.Close()
	v, err := c.Version()
	if err != nil {
		t.Fatalf("Version: %v", err)
	}
	if v[0] != 4 {
		t.Errorf("Version() = %v, want major 4", v)
	}
	if _, err := c.List(); err != nil {
		t.Errorf("List: %v", err)
	}
	if _, err := c.Info("cairn-test-no-such-device"); err == nil {
		t.Errorf("Info(missing device) succeeded, want an error")
	}
}
