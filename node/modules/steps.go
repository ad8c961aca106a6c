package modules

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"cairn.dev/cairn/pkg/kmod"
	"cairn.dev/cairn/pkg/logtree"
)

// Modules are loaded in four steps, each from the module directory of its
// time, by name and for what the devices ask for (coldplug):
//
//	PID 1's core, before the supervisor   bootModules (LoadBoot)
//	storage child, first                  the devices' modules from the initramfs, diskModules
//	storage child, once /system is up     the devices' modules from the system partition
//	storage child, once the ESP is up     the CPU's AES module, dataModules
//
// The initramfs carries what a boot needs before the system partition is
// mounted (build/modules.Early); the system partition carries every
// module, the data partition's, the network cards of real machines and
// Kubernetes' networking among them.
//
// Of the modules the CPU's features ask for (accelerated ciphers, hashes
// and checksums), only those of the algorithms the node uses at every boot
// are loaded here: each registers many algorithms, which cost seconds
// under software emulation when the kernel tests them (the node's command
// line turns the tests off: build/README.md). Those for sha256 and
// crc32c load with the disks (diskAlgorithms); the one for AES, which
// dm-crypt picks when it opens the data partition, loads last, while the
// network comes up and enrolment unseals, and enrolment waits for it only
// before it mounts the data partition. The others (GHASH, SHA-1, SHA-512,
// CRC-T10DIF) load when the kernel asks for their algorithm.
//
// Loading a module by name here costs milliseconds; the kernel's own
// request for it runs /init in modprobe mode (modprobe.go), some 0.13 s
// under software emulation. So what every boot asks for is named, and a
// role names what its programs will ask for (Load).

// bootModules are what the core needs before the supervisor starts: the
// power button, read through evdev, and efivarfs.
var bootModules = []string{
	"button",   // ACPI power button, for a clean shutdown from the host
	"evdev",    // /dev/input/event*, through which the button is read
	"efivarfs", // EFI variables, mounted before the supervisor starts
}

// diskModules are what the storage child needs besides the disk's driver,
// which coldplug finds, up to the ESP.
var diskModules = []string{
	// /dev/mapper/control, which storage opens, appears only once dm_mod
	// is loaded; the kernel asks for it only when the node exists.
	"dm_mod",
	"dm_verity", "erofs", "crc32c_generic", // the verified system partition
	"vfat", "nls_cp437", "nls_ascii", // the ESP
	"qemu_fw_cfg", // node parameters under qemu
}

// diskAlgorithms are the algorithms whose CPU modules the disk step loads
// first: an implementation is picked when its user starts, for good, and
// both start with the system partition. dm-verity hashes every block it
// reads with sha256; erofs's libcrc32c binds a crc32c, through which XFS
// checksums its metadata.
var diskAlgorithms = []string{"sha256", "crc32c"}

// cpuModaliasFile is the CPU's modalias, which lists its features.
const cpuModaliasFile = "/sys/devices/system/cpu/modalias"

// dataModules are what the data partition needs besides its cipher.
var dataModules = []string{"dm_crypt", "xfs"}

// moduleParams are the parameters a node gives modules as it loads them,
// by module name.
var moduleParams = map[string]string{
	// The watchdog core stops every device early in the kernel's reboot,
	// before the drivers shut down, and a machine that hangs after that
	// (a driver stuck in its shutdown, a lockup under emulation) would
	// stay hung. Kept running, the device resets it. The next boot's
	// driver stops it when it probes, until PID 1 arms it again
	// (cmd/init/watchdog.go); a poweroff disarms it first.
	"watchdog": "stop_on_reboot=0",
}

// devices tells the devices' modaliases from the CPU's.
func devices(modalias string) bool { return !kmod.CPUModalias(modalias) }

// moduleDir returns the running kernel's module directory.
func moduleDir() string {
	return filepath.Join("/lib/modules", kmod.KernelRelease())
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
	return kmod.NewLoader(idx, append([]kmod.LoaderOption{kmod.WithParams(moduleParams)}, opts...)...), nil
}

// LoadBoot points the kernel's module requests at modprobe mode, then
// loads bootModules from the initramfs: the core runs it before its
// supervisor starts. It returns how many it loaded.
func LoadBoot(ctx context.Context, log logtree.LeveledLogger) (int, error) {
	if err := serveModuleRequests(modprobePath, modprobeSysctl); err != nil {
		log.Warningf("%v", err)
	}
	l, err := openLoader(moduleDir(), procModules, kmod.WithLogger(log))
	if err != nil {
		return 0, err
	}
	return loadWith(ctx, l, nil, nil, bootModules)
}

// Load loads the modules names (module names, not aliases) and their
// dependencies from the node's module directory, in this process, and
// returns how many it loaded. A role names what its programs will ask the
// kernel for within their first minute, so that the loads happen while it
// waits for its cluster, not on the way to its first pod: each costs
// milliseconds here, where the kernel's request for it runs /init in
// modprobe mode, 0.2 to 2.5 s on a busy emulated node. A name no module
// has is skipped; a module that fails to load is a warning in log, and its
// program's own request later says why.
func Load(ctx context.Context, log logtree.LeveledLogger, names ...string) (int, error) {
	return loadFrom(ctx, moduleDir(), procModules, names, kmod.WithLogger(log))
}

// loadFrom is Load from the module directory dir, with procModules
// listing what is loaded already.
func loadFrom(ctx context.Context, dir, procModules string, names []string, opts ...kmod.LoaderOption) (int, error) {
	l, err := openLoader(dir, procModules, opts...)
	if err != nil {
		return 0, fmt.Errorf("when loading modules: %w", err)
	}
	return loadWith(ctx, l, nil, nil, names)
}

// loadWith loads with l what the modaliases of devices which accepts ask
// for (none when which is nil), and named, all at once; loads are logged,
// one entry per module, and a module that fails to load is a warning,
// never fatal. It returns how many modules l loaded, and an error only if
// it could not look at the devices at all.
func loadWith(ctx context.Context, l *kmod.Loader, devices *kmod.Devices, which func(modalias string) bool, named []string) (int, error) {
	var known []string
	for _, m := range named {
		if l.Has(m) {
			known = append(known, m)
		}
	}
	var err error
	if which != nil {
		err = l.Coldplug(ctx, devices, which, known...)
	} else {
		err = l.LoadAll(ctx, known)
	}
	return len(l.Loaded()), err
}

// Steps are the storage child's steps of loading modules: LoadDisks,
// LoadSystem and LoadData, in that order, each once it has succeeded.
type Steps struct {
	// initramfs is the kernel's module directory at boot; system is the
	// one on the mounted system partition, which replaces it.
	initramfs, system string
	printf            func(format string, args ...any)
	// placed is set once system is bound over initramfs.
	placed bool
	// devices follows the devices' modaliases from the first coldplug
	// on: the system partition's needs no walk of sysfs of its own, and
	// Hotplug takes over from it.
	devices *kmod.Devices
	// served are the modaliases the last coldplug served, which Hotplug
	// leaves alone.
	served []string
}

// NewSteps returns the steps of a node whose system partition is mounted
// at systemRoot; printf writes a phase line to the consoles.
func NewSteps(systemRoot string, printf func(string, ...any)) *Steps {
	return &Steps{
		initramfs: moduleDir(),
		system:    filepath.Join(systemRoot, "lib/modules", kmod.KernelRelease()),
		printf:    printf,
	}
}

// LoadDisks loads from the initramfs the CPU's modules for diskAlgorithms,
// if it has them, then what the devices ask for, the disk's driver among
// them, and diskModules.
func (m *Steps) LoadDisks(ctx context.Context, log logtree.LeveledLogger) error {
	return m.step(ctx, "coldplug loaded %d modules in %v", diskAlgorithms, devices, diskModules, log)
}

// cpuModulesFor returns the modules that both the CPU's modalias, read
// from the file modalias, and the kernel's request for one of the crypto
// algorithms algs ("crypto-aes") lead to: the CPU's accelerated
// implementations of them. A CPU without one, or a modalias that cannot
// be read, has none.
func cpuModulesFor(l *kmod.Loader, modalias string, algs ...string) []string {
	b, err := os.ReadFile(modalias)
	if err != nil {
		return nil
	}
	cpu := l.Match(strings.TrimSpace(string(b)))
	var mods []string
	for _, alg := range algs {
		for _, m := range l.Resolve("crypto-" + alg) {
			if slices.Contains(cpu, m) {
				mods = append(mods, m)
			}
		}
	}
	return mods
}

// LoadSystem binds the system partition's module directory over the
// initramfs's, read-only, so that the kernel's module requests find every
// module Cairn carries from then on, and loads what the devices ask for of
// it (network cards of real machines). A system partition without this
// kernel's modules is said on the consoles and leaves the node with the
// initramfs's, which do not reach the data partition: no error, since
// retrying cannot mend an image built that way. Any other failure to look
// (an I/O error: dm-verity refusing a block) is the step's error.
func (m *Steps) LoadSystem(ctx context.Context, log logtree.LeveledLogger) error {
	if !m.placed {
		_, err := os.Stat(filepath.Join(m.system, "modules.dep"))
		if errors.Is(err, os.ErrNotExist) {
			m.printf("the system partition has no modules for kernel %s (%v): only the initramfs's are loaded", kmod.KernelRelease(), err)
			m.placed = true
			m.coldplugged()
			return nil
		}
		if err != nil {
			return fmt.Errorf("when looking for the system partition's modules: %w", err)
		}
		if err := unix.Mount(m.system, m.initramfs, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("when binding %s over %s: %w", m.system, m.initramfs, err)
		}
		if err := unix.Mount("", m.initramfs, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY, ""); err != nil {
			return fmt.Errorf("when making %s read-only: %w", m.initramfs, err)
		}
		m.placed = true
	}
	if err := m.step(ctx, "coldplug loaded %d more modules from the system partition in %v", nil, devices, nil, log); err != nil {
		return err
	}
	m.coldplugged()
	return nil
}

// coldplugged notes what the last coldplug served, for Hotplug.
func (m *Steps) coldplugged() {
	if m.devices != nil {
		m.served = m.devices.Known()
	}
}

// Hotplug loads, for as long as the node runs, what the devices that
// appear after LoadSystem ask for (kmod.Hotplug): a USB stick's
// usb-storage, then the SCSI disk driver its disk asks for, so that a
// parameters disk plugged into a waiting node is seen. It takes over the
// coldplug's uevent socket, and waits on it without polling. It runs
// after LoadSystem; a run that failed leaves the next one to open a socket
// of its own and walk sysfs for the devices it missed meanwhile. ready is
// called once, when it first waits.
func (m *Steps) Hotplug(ctx context.Context, log logtree.LeveledLogger, ready func()) error {
	if m.devices == nil {
		d, err := kmod.WatchDevices("/sys/devices")
		if err != nil {
			d.Close()
			return fmt.Errorf("no hotplug: %w", err)
		}
		m.devices = d
	}
	open := func() (*kmod.Loader, error) {
		return openLoader(m.initramfs, procModules, kmod.WithLogger(log))
	}
	err := kmod.Hotplug(ctx, m.devices, m.served, devices, open, log, ready)
	if ctx.Err() == nil {
		// The socket may be what failed: the next run opens another,
		// and walks sysfs for what it missed.
		m.devices.Close()
		m.devices = nil
	}
	return err
}

// LoadData loads the CPU's AES module, if it has one, which dm-crypt picks
// when it opens the data partition, and dataModules.
func (m *Steps) LoadData(ctx context.Context, log logtree.LeveledLogger) error {
	return m.step(ctx, "loaded %d modules for the data partition in %v", []string{"aes"}, nil, dataModules, log)
}

// step is one step of loading from the node's module directory: first the
// CPU's modules for the algorithms algs, then what the modaliases which
// accepts ask for (none when which is nil) with named. It is said on the
// consoles with format, which takes the count and the time it took.
func (m *Steps) step(ctx context.Context, format string, algs []string, which func(string) bool, named []string, log logtree.LeveledLogger) error {
	start := time.Now()
	l, err := openLoader(m.initramfs, procModules, kmod.WithLogger(log))
	if err != nil {
		return fmt.Errorf("when loading modules: %w", err)
	}
	if len(algs) > 0 {
		if err := l.LoadAll(ctx, cpuModulesFor(l, cpuModaliasFile, algs...)); err != nil {
			return fmt.Errorf("when loading modules: %w", err)
		}
	}
	if which != nil && m.devices == nil {
		devices, err := kmod.WatchDevices("/sys/devices")
		if err != nil {
			log.Warningf("%v", err)
		}
		m.devices = devices
	}
	n, err := loadWith(ctx, l, m.devices, which, named)
	if err != nil {
		return fmt.Errorf("when loading modules: %w", err)
	}
	m.printf(format, n, time.Since(start).Round(time.Millisecond))
	return nil
}
