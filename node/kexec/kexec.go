// Package kexec boots the node's own image again without the firmware: it
// loads the kernel, the initramfs and the command line of the unified
// kernel image on the ESP (read with pkg/uki) as the kernel to kexec
// into, for PID 1 to jump into with reboot(2) once everything is
// unmounted.
//
//	/esp/EFI/BOOT/BOOTX64.EFI ─uki.Locate─▶ spans ─sendfile─▶ memfds
//	  ─kexec_file_load─▶ the kernel holds the next boot
//	                      ─reboot(LINUX_REBOOT_CMD_KEXEC)─▶ (PID 1)
package kexec

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"cairn.dev/cairn/pkg/uki"
)

// A node asked to reboot boots its own image again with kexec: the kernel
// and initramfs of the unified kernel image on the ESP, loaded by the
// running kernel, which then jumps into them without a reset. That skips
// the firmware, the longest part of a reboot (12 to 18 s of it in the
// end-to-end suites' VMs). A reboot that follows a failure, one asked to
// go through the firmware, and one that cannot kexec go through it.
const (
	// kexecImage is the image the firmware boots (build/disk.BootPath),
	// on the ESP as mounted at /esp.
	kexecImage = "/esp/EFI/BOOT/BOOTX64.EFI"
	// stubInfo is the EFI variable systemd's stub sets when it boots a
	// unified kernel image: without it, this boot did not come from the
	// image on the ESP (a kernel handed to qemu directly, say), and kexec
	// would boot something else than what runs.
	stubInfo = "/sys/firmware/efi/efivars/StubInfo-4a67b082-0a4c-41cf-b6c7-440b29bb8c4f"
	// kexecLoaded says "1" while the kernel holds an image to kexec into.
	kexecLoaded = "/sys/kernel/kexec_loaded"
)

// Load loads the ESP's unified kernel image as the kernel to kexec
// into, with its own command line. It must run while the ESP is mounted.
// The kernel and the initramfs go from the image's file to files in memory
// inside the kernel (sendfile), never through this process's memory. It
// says how long copying them and loading them took, apart.
func Load() (string, error) {
	if _, err := os.Stat(stubInfo); err != nil {
		return "", fmt.Errorf("this boot did not come from the ESP's unified kernel image (%w)", err)
	}
	start := time.Now()
	f, err := os.Open(kexecImage)
	if err != nil {
		return "", fmt.Errorf("when opening the boot image: %w", err)
	}
	defer f.Close()
	b, err := uki.Locate(f)
	if err != nil {
		return "", fmt.Errorf("when reading %s: %w", kexecImage, err)
	}
	kernel, err := memfdFrom("kexec-kernel", f, b.Kernel)
	if err != nil {
		return "", err
	}
	defer unix.Close(kernel)
	initramfs, err := memfdFrom("kexec-initramfs", f, b.Initramfs)
	if err != nil {
		return "", err
	}
	defer unix.Close(initramfs)
	copied := time.Now()
	if err := unix.KexecFileLoad(kernel, initramfs, b.Cmdline, 0); err != nil {
		return "", fmt.Errorf("when loading the kernel to kexec into: %w", err)
	}
	return fmt.Sprintf("copying %.1f MB %v, kexec_file_load %v",
		float64(b.Kernel.Size+b.Initramfs.Size)/1e6, copied.Sub(start).Round(time.Millisecond),
		time.Since(copied).Round(time.Millisecond)), nil
}

// Loaded says whether the kernel holds an image to kexec into
// (/sys/kernel/kexec_loaded), such as one Load loaded in another process.
func Loaded() bool {
	b, err := os.ReadFile(kexecLoaded)
	return err == nil && strings.TrimSpace(string(b)) == "1"
}

// memfdFrom returns a file in memory holding the bytes of f that s spans,
// for kexec_file_load.
func memfdFrom(name string, f *os.File, s uki.Span) (int, error) {
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("when creating %s: %w", name, err)
	}
	// sendfile reads at off without moving f's own offset. f is a regular
	// file, which its descriptor's blocking mode (Fd) does not concern.
	in := int(f.Fd())
	for off, rest := s.Offset, s.Size; rest > 0; {
		n, err := unix.Sendfile(fd, in, &off, int(min(rest, 1<<30)))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err == nil && n == 0 {
			err = fmt.Errorf("%s ends %d bytes short of the section", f.Name(), rest)
		}
		if err != nil {
			unix.Close(fd)
			return -1, fmt.Errorf("when copying %s: %w", name, err)
		}
		rest -= int64(n)
	}
	return fd, nil
}
