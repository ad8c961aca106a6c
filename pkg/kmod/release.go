package kmod

import "golang.org/x/sys/unix"

// KernelRelease returns the running kernel's release, what `uname -r`
// prints: its modules are in /lib/modules/<release>.
func KernelRelease() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "unknown"
	}
	return unix.ByteSliceToString(u.Release[:])
}
