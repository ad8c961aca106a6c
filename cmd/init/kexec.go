package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"cairn.dev/cairn/build/uki"
	"cairn.dev/cairn/node/roleserve"
	"cairn.dev/cairn/pkg/event"
	"cairn.dev/cairn/pkg/supervisor"
)

// A node asked to reboot boots its own image again with kexec: the kernel
// and initramfs of the unified kernel image on the ESP, loaded by the
// running kernel, which then jumps into them without a reset. That skips
// the firmware, the longest part of a reboot (12 to 18 s of it in the
// end-to-end suites' VMs). A reboot that follows a failure, one asked to
// go through the firmware, and one that cannot kexec go through it.
//
// Loading is slow too (2.6 s in those VMs: the kernel verifies the
// image's signature and hashes every segment), so the core loads the image
// ahead, once the node has joined its cluster and settled (kexecPreload), and
// PID 1 loads it at the reboot only when that did not happen or the image
// was replaced since (finish).
const (
	// kexecImage is the image the firmware boots (build/disk.BootPath),
	// on the ESP as mounted at /esp.
	kexecImage = "/esp/EFI/BOOT/BOOTX64.EFI"
	// stubInfo is the EFI variable systemd's stub sets when it boots a
	// unified kernel image: without it, this boot did not come from the
	// image on the ESP (a kernel handed to qemu directly, say), and kexec
	// would boot something else than what runs.
	stubInfo = "/sys/firmware/efi/efivars/StubInfo-4a67b082-0a4c-41cf-b6c7-440b29bb8c4f"
	// kexecLoaded is the kernel's word on whether an image is loaded.
	kexecLoaded = "/sys/kernel/kexec_loaded"
	// kexecStampFile holds the stamp of the image the core loaded ahead.
	kexecStampFile = "/run/cairn/kexec-loaded"
)

// errNotFromESP is why a boot that did not come from the ESP's image
// cannot kexec into it.
var errNotFromESP = errors.New("this boot did not come from the ESP's unified kernel image")

// A kexecLoad is what loadKexec loaded.
type kexecLoad struct {
	// stamp is the image's size and modification time, which change when
	// the image is replaced (imageStamp).
	stamp string
	// how says how long reading the image and loading it took, apart.
	how string
}

// loadKexec loads the ESP's unified kernel image as the kernel to kexec
// into, with its own command line. It must run while the ESP is mounted.
func loadKexec() (kexecLoad, error) {
	if _, err := os.Stat(stubInfo); err != nil {
		return kexecLoad{}, fmt.Errorf("%w (%w)", errNotFromESP, err)
	}
	start := time.Now()
	f, err := os.Open(kexecImage)
	if err != nil {
		return kexecLoad{}, fmt.Errorf("when opening the boot image: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return kexecLoad{}, fmt.Errorf("when looking at %s: %w", kexecImage, err)
	}
	b, err := uki.Read(f)
	if err != nil {
		return kexecLoad{}, fmt.Errorf("when reading %s: %w", kexecImage, err)
	}
	read := time.Now()
	kernel, err := memfd("kexec-kernel", b.Kernel)
	if err != nil {
		return kexecLoad{}, err
	}
	defer unix.Close(kernel)
	initramfs, err := memfd("kexec-initramfs", b.Initramfs)
	if err != nil {
		return kexecLoad{}, err
	}
	defer unix.Close(initramfs)
	copied := time.Now()
	if err := unix.KexecFileLoad(kernel, initramfs, b.Cmdline, 0); err != nil {
		return kexecLoad{}, fmt.Errorf("when loading the kernel to kexec into: %w", err)
	}
	return kexecLoad{
		stamp: imageStamp(fi),
		how: fmt.Sprintf("reading %.1f MB %v, copying %v, kexec_file_load %v",
			float64(len(b.Kernel)+len(b.Initramfs))/1e6, read.Sub(start).Round(time.Millisecond),
			copied.Sub(read).Round(time.Millisecond), time.Since(copied).Round(time.Millisecond)),
	}, nil
}

// imageStamp is what tells a replaced image from the one loaded: its size
// and modification time. Nothing on a node writes the image today; the
// stamp keeps a later update from rebooting into the image it replaced.
func imageStamp(fi os.FileInfo) string {
	return fmt.Sprintf("%d %d", fi.Size(), fi.ModTime().UnixNano())
}

// memfd returns a file in memory holding data, for kexec_file_load.
func memfd(name string, data []byte) (int, error) {
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("when creating %s: %w", name, err)
	}
	for rest := data; len(rest) > 0; {
		n, err := unix.Write(fd, rest)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			unix.Close(fd)
			return -1, fmt.Errorf("when writing %s: %w", name, err)
		}
		rest = rest[n:]
	}
	return fd, nil
}

// kexecSettle is how long after joining its cluster a node waits before it
// loads the image for kexec: long enough for its services to have started
// (etcd and the curator within seconds, in emulated VMs too), so that
// reading 20 MB from the ESP does not compete with their disk and CPU.
const kexecSettle = 30 * time.Second

// A kexecPreload is the core's runnable that loads the ESP's image for
// kexec once the node has joined its cluster and settled, so that a reboot
// need not, and writes the image's stamp for PID 1. The kernel holds the
// image (about 20 MB) until the reboot. It loads on a thread of the idle
// scheduling class, so that the node's services keep the CPU, and it does
// not retry: a reboot loads the image itself when it finds none loaded
// ahead.
type kexecPreload struct {
	membership event.Watchable[*roleserve.Membership]
	// settle is kexecSettle on a node; load is loadKexec; stampFile is
	// kexecStampFile.
	settle    time.Duration
	load      func() (kexecLoad, error)
	stampFile string
}

func (p *kexecPreload) run(ctx context.Context) error {
	w := p.membership.Watch()
	defer w.Close()
	if _, err := w.Get(ctx, event.Filter(func(m *roleserve.Membership) bool { return m != nil })); err != nil {
		return err
	}
	supervisor.Signal(ctx, supervisor.SignalHealthy)
	select {
	case <-time.After(p.settle):
	case <-ctx.Done():
		return ctx.Err()
	}
	log := supervisor.Logger(ctx)
	start := time.Now()
	l, err := loadIdle(p.load)
	// The image went through the heap; give it back at once.
	debug.FreeOSMemory()
	switch {
	case errors.Is(err, errNotFromESP):
		log.Infof("not loading the ESP's image for kexec: %v", err)
	case err != nil:
		log.Warningf("could not load the ESP's image for kexec ahead of a reboot, which will try again: %v", err)
	default:
		if err := writeStamp(p.stampFile, l.stamp); err != nil {
			log.Warningf("loaded the ESP's image for kexec, but a reboot will load it again: %v", err)
			break
		}
		log.Infof("loaded the ESP's image for kexec ahead of a reboot in %v (%s)", time.Since(start).Round(time.Millisecond), l.how)
	}
	supervisor.Signal(ctx, supervisor.SignalDone)
	return nil
}

// loadIdle runs load on a thread of the idle scheduling class, which gets
// the CPU only when nothing else wants it, and then puts the thread back
// in the normal class.
func loadIdle(load func() (kexecLoad, error)) (kexecLoad, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	// Best effort: at worst the load competes with the node's services.
	if unix.SchedSetAttr(0, &unix.SchedAttr{Policy: unix.SCHED_IDLE}, 0) == nil {
		defer unix.SchedSetAttr(0, &unix.SchedAttr{Policy: unix.SCHED_NORMAL}, 0)
	}
	return load()
}

// writeStamp writes stamp to path, creating its directory.
func writeStamp(path, stamp string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("when creating the directory of %s: %w", path, err)
	}
	if err := os.WriteFile(path, []byte(stamp), 0o600); err != nil {
		return fmt.Errorf("when writing %s: %w", path, err)
	}
	return nil
}

// kexecPreloaded reports whether the image to kexec into was loaded ahead
// and is still the one on the ESP: the kernel holds an image, and the
// stamp the core wrote (stampFile) is that of the image at imagePath. If
// not, it says why.
func kexecPreloaded(loadedFile, stampFile, imagePath string) (bool, string) {
	loaded, err := os.ReadFile(loadedFile)
	if err != nil {
		return false, fmt.Sprintf("when reading %s: %v", loadedFile, err)
	}
	if strings.TrimSpace(string(loaded)) != "1" {
		return false, "no image was loaded ahead"
	}
	stamp, err := os.ReadFile(stampFile)
	if err != nil {
		return false, fmt.Sprintf("no stamp for the image loaded ahead: %v", err)
	}
	fi, err := os.Stat(imagePath)
	if err != nil {
		return false, fmt.Sprintf("when looking at %s: %v", imagePath, err)
	}
	if now := imageStamp(fi); now != string(stamp) {
		return false, fmt.Sprintf("%s was replaced since it was loaded (size and time %s, then %s)", imagePath, now, stamp)
	}
	return true, ""
}
