package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"cairn.dev/cairn/pkg/mountinfo"
)

func TestUnmountOrder(t *testing.T) {
	in := `1 1 0:2 / / rw - rootfs rootfs rw
20 1 0:20 / /proc rw - proc proc rw
21 1 0:21 / /sys rw - sysfs sysfs rw
22 1 0:5 / /dev rw - devtmpfs devtmpfs rw
23 22 0:22 / /dev/pts rw - devpts devpts rw
24 21 0:24 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw
30 1 8:2 / /data\040disk rw - xfs /dev/mapper/data rw
`
	mounts, err := mountinfo.Parse(strings.NewReader(in))
	if err != nil {
		t.Fatalf("mountinfo.Parse: %v", err)
	}
	want := []string{"/data disk", "/sys/fs/cgroup", "/dev/pts", "/dev", "/sys", "/proc"}
	if diff := cmp.Diff(want, unmountOrder(mounts)); diff != "" {
		t.Errorf("unmountOrder mismatch (-want +got):\n%s", diff)
	}
}

// TestBootMounts checks that every filesystem PID 1 promises is in the
// list, and that each comes after the mount that holds its mount point.
func TestBootMounts(t *testing.T) {
	var targets []string
	for _, m := range bootMounts {
		targets = append(targets, m.target)
	}
	for _, want := range []string{"/proc", "/sys", "/dev", "/dev/pts", "/dev/shm", "/run", "/tmp", "/sys/fs/cgroup"} {
		if !slices.Contains(targets, want) {
			t.Errorf("bootMounts = %q, want it to mount %s", targets, want)
		}
	}
	for i, m := range bootMounts {
		for _, later := range bootMounts[i+1:] {
			if strings.HasPrefix(m.target, later.target+"/") {
				t.Errorf("bootMounts mounts %s before %s, which holds it", m.target, later.target)
			}
		}
	}
}
