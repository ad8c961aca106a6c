package parameters

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"cairn.dev/cairn/node/esp"
)

// DiskFile is where a parameters disk holds the node parameters: the
// ESP's path, in a FAT filesystem on a whole disk or on one of its
// partitions. A node that found no parameters at boot, and belongs to no
// cluster yet, waits for such a disk (a USB stick, a BMC's virtual
// medium, a disk the hypervisor attaches) and enrols with what it holds.
const DiskFile = esp.ParametersPath

// Disks looks for node parameters on the block devices attached to the
// node, other than the disk it booted from. Each device is tried once
// while it stays attached: a disk taken out and put back (or another in
// its place) is tried again. It is not safe for concurrent use.
type Disks struct {
	// SysBlock is the sysfs block class directory ("/sys/class/block").
	SysBlock string
	// Dev holds the device nodes ("/dev").
	Dev string
	// BootDisk is the kernel name of the disk the node booted from
	// ("vda"): neither it nor its partitions are tried.
	BootDisk string
	// Mount mounts the FAT filesystem of device read-only at dir; Unmount
	// undoes it. Dir is a directory of its own, empty, that the caller
	// made.
	Mount   func(device, dir string) error
	Unmount func(dir string) error
	// Dir is where a device is mounted while it is read.
	Dir string
	// Logf, if set, says what was tried and what came of it.
	Logf func(format string, args ...any)

	// tried holds the devices tried, by name and the disk's sequence
	// number, with those still attached kept at each scan.
	tried map[string]bool
}

// Scan tries every device attached since the last scan and returns what
// the first that holds DiskFile gives: its parameters, or why they cannot
// be used, with the device named. It returns nil when no new device holds
// the file, or on an error listing the devices (which the next scan tries
// again).
func (d *Disks) Scan() (found *Loaded, source string) {
	entries, err := os.ReadDir(d.SysBlock)
	if err != nil {
		d.logf("Cannot list block devices to look for node parameters: %v", err)
		return nil, ""
	}
	if d.tried == nil {
		d.tried = map[string]bool{}
	}
	present := map[string]bool{}
	var names []string
	for _, e := range entries {
		name := e.Name()
		if ownDevice(name) {
			continue
		}
		disk := d.disk(name)
		if disk == d.BootDisk {
			continue
		}
		key := name + "@" + d.diskSeq(disk)
		present[key] = true
		if !d.tried[key] {
			names = append(names, key)
		}
	}
	// A device that is gone is tried again when it comes back.
	for key := range d.tried {
		if !present[key] {
			delete(d.tried, key)
		}
	}
	slices.Sort(names)
	for _, key := range names {
		d.tried[key] = true
		name, _, _ := strings.Cut(key, "@")
		b, err := d.read(name)
		switch {
		case errors.Is(err, errNoFile):
			d.logf("%s holds no node parameters: %v", name, err)
			continue
		case err != nil:
			return &Loaded{Err: fmt.Errorf("parameters disk %s: %w", name, err)}, name
		}
		p, err := Parse(b)
		if err != nil {
			return &Loaded{Err: fmt.Errorf("parameters disk %s: %w", name, err)}, name
		}
		return &Loaded{Parameters: p}, name
	}
	return nil, ""
}

// errNoFile marks a device that holds no DiskFile: no FAT filesystem, or
// none with the file. Such a device is passed over.
var errNoFile = errors.New("no " + DiskFile)

// read mounts device name, reads DiskFile and unmounts it.
func (d *Disks) read(name string) ([]byte, error) {
	dev := filepath.Join(d.Dev, name)
	if err := d.Mount(dev, d.Dir); err != nil {
		return nil, fmt.Errorf("%w: not a FAT filesystem that mounts (%v)", errNoFile, err)
	}
	b, readErr := readLimited(filepath.Join(d.Dir, DiskFile), maxSize)
	if err := d.Unmount(d.Dir); err != nil {
		// The mount point stays busy; the next device cannot be read there.
		return nil, fmt.Errorf("when unmounting %s: %w", dev, err)
	}
	if errors.Is(readErr, os.ErrNotExist) {
		return nil, fmt.Errorf("%w on its filesystem", errNoFile)
	}
	if readErr != nil {
		return nil, fmt.Errorf("when reading %s: %w", DiskFile, readErr)
	}
	return b, nil
}

// ownDevice says whether the device name cannot hold parameters: a
// device the node makes itself (device-mapper, loop, RAM disks) or an
// optical drive.
func ownDevice(name string) bool {
	for _, p := range []string{"loop", "ram", "zram", "dm-", "sr", "nbd", "md"} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// disk returns the disk that holds device name: name itself for a disk,
// the parent directory of its sysfs entry for a partition.
func (d *Disks) disk(name string) string {
	if _, err := os.Stat(filepath.Join(d.SysBlock, name, "partition")); err != nil {
		return name
	}
	real, err := filepath.EvalSymlinks(filepath.Join(d.SysBlock, name))
	if err != nil {
		return name
	}
	return filepath.Base(filepath.Dir(real))
}

// diskSeq returns the kernel's sequence number of disk, which changes
// when a disk is attached again under the same name; empty when the
// kernel has none.
func (d *Disks) diskSeq(disk string) string {
	b, err := os.ReadFile(filepath.Join(d.SysBlock, disk, "diskseq"))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

func (d *Disks) logf(format string, args ...any) {
	if d.Logf != nil {
		d.Logf(format, args...)
	}
}
