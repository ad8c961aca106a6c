package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"cairn.dev/cairn/pkg/kmod"
	"cairn.dev/cairn/pkg/logtree"
)

// explicitModules are loaded whether or not a device asks for them: no
// modalias leads to them reliably, and the node needs them.
var explicitModules = []string{
	"button",      // ACPI power button, for a clean shutdown from the host
	"evdev",       // /dev/input/event*, through which the button is read
	"qemu_fw_cfg", // node parameters under qemu
	"efivarfs",    // EFI variables, on machines booted through EFI
	// The storage stack. The kernel asks for the cipher and checksum
	// modules by name when dm-crypt or XFS needs them, through a modprobe
	// the node does not have: they must be loaded before storage runs.
	"dm_crypt", "xts", "aesni_intel", "aes_generic",
	"crc32c_intel", "crc32c_generic", "libcrc32c", "xfs",
	"vfat", "nls_cp437", "nls_iso8859_1", "nls_utf8", "nls_ascii",
}

// wantExplicit reports whether the explicit module m applies to this
// machine: efivarfs refuses to load without EFI.
func wantExplicit(m string) bool {
	if m == "efivarfs" {
		_, err := os.Stat("/sys/firmware/efi")
		return err == nil
	}
	return true
}

// loadModules loads the modules of the running kernel that the machine's
// devices ask for, and explicitModules. Loads are logged to log, one entry
// per module; a module that fails to load is a warning, never fatal. It
// returns how many modules it loaded, and an error only if it could not
// look at the modules or devices at all.
func loadModules(ctx context.Context, log logtree.LeveledLogger) (int, error) {
	idx, err := kmod.Open(filepath.Join("/lib/modules", kernelRelease()))
	if err != nil {
		return 0, fmt.Errorf("when reading module index: %w", err)
	}
	var present []string
	if f, err := os.Open("/proc/modules"); err == nil {
		present, err = kmod.ReadProcModules(f)
		f.Close()
		if err != nil {
			log.Warningf("%v", err)
		}
	}
	l := kmod.NewLoader(idx, kmod.WithLogger(log), kmod.WithPresent(present...))
	err = l.Coldplug(ctx, "/sys/devices")
	for _, m := range explicitModules {
		if wantExplicit(m) && l.Has(m) {
			_ = l.Load(m) // a failure is logged by the loader
		}
	}
	return len(l.Loaded()), err
}
