package parameters

import "golang.org/x/sys/unix"

// MountFAT mounts the FAT filesystem of device read-only at dir, for
// Disks.Mount: nothing on it runs, and nothing on it is written.
func MountFAT(device, dir string) error {
	return unix.Mount(device, dir, "vfat", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "")
}

// Unmount unmounts dir, for Disks.Unmount.
func Unmount(dir string) error { return unix.Unmount(dir, 0) }
