package main

import (
	"errors"
	"fmt"
	"os"
	"slices"

	"golang.org/x/sys/unix"

	"cairn.dev/cairn/pkg/mountinfo"
)

// A mount is a filesystem init mounts at boot.
type mount struct {
	target string
	fstype string
	source string
	flags  uintptr
	data   string
	// mode is the permission of the mount point if init creates it.
	mode os.FileMode
}

const (
	nosuidNodev       = unix.MS_NOSUID | unix.MS_NODEV
	nosuidNodevNoexec = unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC
)

// bootMounts are mounted by PID 1 before anything else, in this order.
var bootMounts = []mount{
	{"/proc", "proc", "proc", nosuidNodevNoexec, "", 0o555},
	{"/sys", "sysfs", "sysfs", nosuidNodevNoexec, "", 0o555},
	{"/dev", "devtmpfs", "devtmpfs", unix.MS_NOSUID, "mode=0755", 0o755},
	{"/dev/pts", "devpts", "devpts", unix.MS_NOSUID | unix.MS_NOEXEC, "mode=0620,ptmxmode=0666", 0o755},
	{"/dev/shm", "tmpfs", "tmpfs", nosuidNodev, "mode=1777", 0o1777},
	{"/run", "tmpfs", "tmpfs", nosuidNodev, "mode=0755", 0o755},
	{"/tmp", "tmpfs", "tmpfs", nosuidNodev, "mode=1777", 0o1777},
	{"/sys/fs/cgroup", "cgroup2", "cgroup2", nosuidNodevNoexec, "nsdelegate", 0o555},
}

// efiVars is mounted by the core after coldplug, as efivarfs may be a
// module, and only on machines booted through EFI.
var efiVars = mount{"/sys/firmware/efi/efivars", "efivarfs", "efivarfs", nosuidNodevNoexec, "", 0o755}

// mountAll mounts ms in order and returns one error per mount that failed,
// each naming its mount. A failed mount does not stop the others.
func mountAll(ms []mount) []error {
	var errs []error
	for _, m := range ms {
		if err := m.mount(); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

func (m mount) mount() error {
	if err := os.MkdirAll(m.target, m.mode); err != nil {
		return fmt.Errorf("when mounting %s on %s: %w", m.fstype, m.target, err)
	}
	err := unix.Mount(m.source, m.target, m.fstype, m.flags, m.data)
	if errors.Is(err, unix.EBUSY) {
		return nil // mounted already, by the kernel (devtmpfs.mount) or earlier
	}
	if err != nil {
		return fmt.Errorf("when mounting %s on %s: %w", m.fstype, m.target, err)
	}
	return nil
}

// mountEFIVars mounts efivarfs if the machine booted through EFI.
func mountEFIVars() error {
	if _, err := os.Stat("/sys/firmware/efi"); err != nil {
		return nil
	}
	return efiVars.mount()
}

// unmountOrder returns the mount points of mounts to unmount, newest mount
// first (mountinfo lists mounts in the order they were made), leaving out
// the root, which cannot be unmounted.
func unmountOrder(mounts []mountinfo.Mount) []string {
	var targets []string
	for _, m := range slices.Backward(mounts) {
		if m.MountPoint != "/" {
			targets = append(targets, m.MountPoint)
		}
	}
	return targets
}

// unmountAll unmounts every mount of the system but the root, newest
// first. A mount that will not go (busy) is remounted read-only, so its
// data is safe, and then detached. It returns what could not be done.
func unmountAll() []error {
	mounts, err := mountinfo.Read()
	if err != nil {
		return []error{err}
	}
	var errs []error
	for _, target := range unmountOrder(mounts) {
		if err := unmountOne(target); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

func unmountOne(target string) error {
	err := unix.Unmount(target, 0)
	if err == nil || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
		return nil // gone already, e.g. with the parent detached before
	}
	roErr := unix.Mount("", target, "", unix.MS_REMOUNT|unix.MS_RDONLY, "")
	if err := unix.Unmount(target, unix.MNT_DETACH); err != nil {
		return fmt.Errorf("when unmounting %s: %w (read-only remount: %v)", target, err, roErr)
	}
	return nil
}
