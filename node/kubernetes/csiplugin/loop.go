package csiplugin

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// The kernel's loop devices back block volumes: one loop device per
// volume file, attached when the volume is first published and detached
// when its last publication goes.

// sysBlock is where the kernel lists block devices, /dev where it makes
// their nodes.
const (
	sysBlock    = "/sys/block"
	loopControl = "/dev/loop-control"
)

// A loop is an attached loop device (/dev/loopN) and the file behind it.
type loop struct{ dev, file string }

// loops lists the attached loop devices. A file deleted since it was
// attached keeps the kernel's mark, " (deleted)", after its path.
func loops() ([]loop, error) {
	entries, err := os.ReadDir(sysBlock)
	if err != nil {
		return nil, fmt.Errorf("when listing block devices: %w", err)
	}
	var out []loop
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), "loop") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(sysBlock, e.Name(), "loop", "backing_file"))
		if errors.Is(err, os.ErrNotExist) {
			continue // not attached
		}
		if err != nil {
			return nil, fmt.Errorf("when reading the backing file of %s: %w", e.Name(), err)
		}
		out = append(out, loop{dev: "/dev/" + e.Name(), file: strings.TrimSuffix(string(b), "\n")})
	}
	return out, nil
}

// loopOf returns the loop device backed by file, or "".
func loopOf(file string) (string, error) {
	ls, err := loops()
	if err != nil {
		return "", err
	}
	for _, l := range ls {
		if l.file == file {
			return l.dev, nil
		}
	}
	return "", nil
}

// DetachLoops detaches every loop device backed by a file below dir, and
// returns those it detached: a worker that stopped with block volumes
// published leaves them attached, holding the files, and the space of a
// deleted volume, until they go.
func DetachLoops(dir string) ([]string, error) {
	ls, err := loops()
	if err != nil {
		return nil, err
	}
	var detached []string
	var errs []error
	for _, l := range ls {
		if !strings.HasPrefix(strings.TrimSuffix(l.file, " (deleted)"), filepath.Clean(dir)+"/") {
			continue
		}
		if err := detachLoop(l.dev); err != nil {
			errs = append(errs, err)
			continue
		}
		detached = append(detached, l.dev)
	}
	return detached, errors.Join(errs...)
}

// attachLoop returns the loop device backed by file, attaching a free one
// to it if none is.
func attachLoop(file string) (string, error) {
	if dev, err := loopOf(file); dev != "" || err != nil {
		return dev, err
	}
	if err := loadLoop(); err != nil {
		return "", err
	}
	ctl, err := os.OpenFile(loopControl, os.O_RDWR, 0)
	if err != nil {
		return "", fmt.Errorf("when opening %s: %w", loopControl, err)
	}
	defer ctl.Close()
	n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
	if err != nil {
		return "", fmt.Errorf("when asking for a free loop device: %w", err)
	}
	dev := fmt.Sprintf("/dev/loop%d", n)
	d, err := openWhenMade(dev, os.O_RDWR)
	if err != nil {
		return "", err
	}
	defer d.Close()
	f, err := os.OpenFile(file, os.O_RDWR, 0)
	if err != nil {
		return "", fmt.Errorf("when opening the volume file %s: %w", file, err)
	}
	defer f.Close()
	cfg := unix.LoopConfig{Fd: uint32(f.Fd())}
	copy(cfg.Info.File_name[:], file)
	if err := unix.IoctlLoopConfigure(int(d.Fd()), &cfg); err != nil {
		return "", fmt.Errorf("when attaching %s to %s: %w", dev, file, err)
	}
	return dev, nil
}

// detachLoop detaches dev from its file.
func detachLoop(dev string) error {
	d, err := os.OpenFile(dev, os.O_RDONLY, 0)
	if err != nil {
		return fmt.Errorf("when opening %s: %w", dev, err)
	}
	defer d.Close()
	if err := unix.IoctlSetInt(int(d.Fd()), unix.LOOP_CLR_FD, 0); err != nil && !errors.Is(err, unix.ENXIO) {
		return fmt.Errorf("when detaching %s: %w", dev, err)
	}
	return nil
}

// resizeLoop makes dev take the current size of its file.
func resizeLoop(dev string) error {
	d, err := os.OpenFile(dev, os.O_RDONLY, 0)
	if err != nil {
		return fmt.Errorf("when opening %s: %w", dev, err)
	}
	defer d.Close()
	if err := unix.IoctlSetInt(int(d.Fd()), unix.LOOP_SET_CAPACITY, 0); err != nil {
		return fmt.Errorf("when giving %s its file's new size: %w", dev, err)
	}
	return nil
}

// loadLoop loads the loop module unless the kernel has it, through the
// modprobe the kernel itself calls for modules (on a node, /init).
func loadLoop() error {
	if _, err := os.Stat(loopControl); err == nil {
		return nil
	}
	b, err := os.ReadFile("/proc/sys/kernel/modprobe")
	if err != nil {
		return fmt.Errorf("when finding modprobe to load the loop module: %w", err)
	}
	modprobe := strings.TrimSpace(string(b))
	if out, err := exec.Command(modprobe, "loop").CombinedOutput(); err != nil {
		return fmt.Errorf("when loading the loop module with %s: %w: %s", modprobe, err, out)
	}
	f, err := openWhenMade(loopControl, os.O_RDWR)
	if err != nil {
		return err
	}
	return f.Close()
}

// openWhenMade opens the device node path with flag, waiting a moment for
// devtmpfs to make it. The caller closes it.
func openWhenMade(path string, flag int) (*os.File, error) {
	deadline := time.Now().Add(5 * time.Second)
	for {
		f, err := os.OpenFile(path, flag, 0)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, os.ErrNotExist) || time.Now().After(deadline) {
			return nil, fmt.Errorf("when opening %s: %w", path, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
