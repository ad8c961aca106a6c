package nodemanagement

import (
	"os"
	"testing"
)

// TestReadResources reads this machine's procfs: the memory figures are
// sane, the node's CPU time counts at least the test's own, and the test's
// own process is listed with its resident memory and
// CPU time, largest processes first.
func TestReadResources(t *testing.T) {
	// Some CPU time of our own to see.
	sum := 0
	for i := range 50_000_000 {
		sum += i
	}
	_ = sum
	res, err := readResources("/proc")
	if err != nil {
		t.Fatal(err)
	}
	if res.MemoryTotalBytes == 0 || res.MemoryAvailableBytes == 0 || res.MemoryAvailableBytes > res.MemoryTotalBytes {
		t.Errorf("memory %d total, %d available: want both set, available below total", res.MemoryTotalBytes, res.MemoryAvailableBytes)
	}
	var own uint64
	var self bool
	for i, p := range res.Processes {
		if i > 0 && p.ResidentBytes > res.Processes[i-1].ResidentBytes {
			t.Errorf("process %d (%d bytes) after one of %d bytes: want largest first", p.Pid, p.ResidentBytes, res.Processes[i-1].ResidentBytes)
		}
		if int(p.Pid) == os.Getpid() {
			self = true
			own = p.CpuTimeMillis
			if p.Name == "" || p.ResidentBytes < 1<<20 || p.CpuTimeMillis == 0 {
				t.Errorf("own process = %+v: want its name, over 1 MiB resident and some CPU time", p)
			}
		}
	}
	if !self {
		t.Errorf("own process %d not among %d processes", os.Getpid(), len(res.Processes))
	}
	if res.Cpus == 0 || res.CpuBusyMillis < own || res.CpuIdleMillis == 0 {
		t.Errorf("%d CPUs, %d ms busy, %d ms idle: want CPUs, busy at least this process's %d ms, some idle", res.Cpus, res.CpuBusyMillis, res.CpuIdleMillis, own)
	}
}
