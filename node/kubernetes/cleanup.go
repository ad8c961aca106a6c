package kubernetes

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"github.com/google/nftables"
	"golang.org/x/sys/unix"

	"cairn.dev/cairn/node/kubernetes/csiplugin"
	"cairn.dev/cairn/pkg/mountinfo"
)

// podsCgroup is the cgroup under which the kubelet (cgroupfs driver) puts
// every pod.
const podsCgroup = "/sys/fs/cgroup/kubepods"

// cleanUp removes what a worker leaves when it stops or crashes: the
// processes of its pods, which containerd's shims keep alive apart from
// containerd, the shims themselves, the mounts of pods and container
// filesystems, the loop devices of block volumes, the masquerade of pod
// traffic, and the pods' host ports (the CNI portmap plugin's table,
// which only the plugin's DEL of each pod would have emptied). It runs
// before a worker starts and after it stopped, so that a removed role
// leaves nothing behind, and a restarted one starts clean. What cannot be
// removed is reported, nothing is left half-done silently.
func (l Layout) cleanUp() error {
	var errs []error
	// Every process of every pod, at once (cgroup v2's cgroup.kill).
	if err := os.WriteFile(filepath.Join(podsCgroup, "cgroup.kill"), []byte("1"), 0); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, fmt.Errorf("when killing the pods' processes: %w", err))
	}
	if err := killPrograms(l.bin("containerd-shim-runc-v2")); err != nil {
		errs = append(errs, err)
	}
	if err := unmountBelow(l.Data, l.Run); err != nil {
		errs = append(errs, err)
	}
	if _, err := csiplugin.DetachLoops(l.data("volumes")); err != nil {
		errs = append(errs, err)
	}
	if nf, err := nftables.New(); err != nil {
		errs = append(errs, fmt.Errorf("when opening nftables: %w", err))
	} else {
		for _, table := range []string{masqueradeTable, hostPortTable} {
			if err := removeTable(nf, table); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// killPrograms sends SIGKILL to every process running the program at
// path.
func killPrograms(path string) error {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return fmt.Errorf("when listing processes: %w", err)
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe"))
		if err != nil || exe != path {
			continue
		}
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("when killing %s (pid %d): %w", path, pid, err)
		}
	}
	return nil
}

// unmountBelow detaches every mount below the directories dirs, deepest
// first: pods' volumes and container root filesystems.
func unmountBelow(dirs ...string) error {
	mounts, err := mountinfo.Read()
	if err != nil {
		return fmt.Errorf("when reading the mounts: %w", err)
	}
	var points []string
	for _, m := range mounts {
		for _, d := range dirs {
			if d != "" && strings.HasPrefix(m.MountPoint, d+"/") {
				points = append(points, m.MountPoint)
				break
			}
		}
	}
	// Deeper mounts first; a mount point is longer than its parent's.
	sort.Slice(points, func(i, j int) bool { return len(points[i]) > len(points[j]) })
	var errs []error
	for _, p := range points {
		if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("when unmounting %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}
