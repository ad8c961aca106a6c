package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"cairn.dev/cairn/pkg/kmod"
	"cairn.dev/cairn/pkg/logtree"
)

// explicitModules are loaded whether or not a device asks for them: the
// node needs them, and neither a modalias nor a request of the kernel
// leads to them. What the kernel asks for by name when it needs it
// (ciphers, checksums, filesystems such as efivarfs and xfs, device-mapper
// targets, codepages) is not listed here: modprobe mode (modprobe.go)
// serves those requests.
var explicitModules = []string{
	"button",      // ACPI power button, for a clean shutdown from the host
	"evdev",       // /dev/input/event*, through which the button is read
	"qemu_fw_cfg", // node parameters under qemu
	// /dev/mapper/control, which storage opens, appears only once dm_mod
	// is loaded; the kernel asks for it only when the node exists.
	"dm_mod",
}

// moduleDir returns the running kernel's module directory.
func moduleDir() string {
	return filepath.Join("/lib/modules", kernelRelease())
}

// openLoader returns a Loader for the module directory dir that knows the
// modules procModules (/proc/modules) lists as loaded. A procModules that
// cannot be read is no error: it only spares the kernel attempts that it
// answers with EEXIST.
func openLoader(dir, procModules string, opts ...kmod.LoaderOption) (*kmod.Loader, error) {
	idx, err := kmod.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("when reading module index: %w", err)
	}
	if f, err := os.Open(procModules); err == nil {
		present, err := kmod.ReadProcModules(f)
		f.Close()
		if err == nil {
			opts = append(opts, kmod.WithPresent(present...))
		}
	}
	return kmod.NewLoader(idx, opts...), nil
}

// loadModules points the kernel's module requests at modprobe mode, then
// loads the modules of the running kernel that the machine's devices ask
// for, and explicitModules. Loads are logged to log, one entry per module;
// a module that fails to load is a warning, never fatal. It returns how
// many modules it loaded, and an error only if it could not look at the
// modules or devices at all.
func loadModules(ctx context.Context, log logtree.LeveledLogger) (int, error) {
	if err := serveModuleRequests(modprobeSysctl); err != nil {
		log.Warningf("%v", err)
	}
	l, err := openLoader(moduleDir(), procModules, kmod.WithLogger(log))
	if err != nil {
		return 0, err
	}
	err = l.Coldplug(ctx, "/sys/devices")
	for _, m := range explicitModules {
		if l.Has(m) {
			_ = l.Load(m) // a failure is logged by the loader
		}
	}
	return len(l.Loaded()), err
}
