package nodemanagement

import (
	"os"
	"os/exec"
	"testing"
)

// burnEnv makes this test binary, run again as a child, burn some CPU
// and exit (TestMain), for its parent's reaped-children time.
const burnEnv = "CAIRN_TEST_BURN"

// burnCPU uses some CPU time, enough for the kernel's clock ticks to see.
func burnCPU() {
	sum := 0
	for i := range 50_000_000 {
		sum += i
	}
	_ = sum
}

// TestReadResources reads this machine's procfs: the memory figures are
// sane, the node's CPU time counts at least the test's own, and the test's
// own process is listed with its resident memory and
// CPU time, its parent and the time of a child it ran, largest
// processes first.
func TestReadResources(t *testing.T) {
	// Some CPU time of our own to see, and of a child's.
	burnCPU()
	child := exec.Command(os.Args[0])
	child.Env = append(os.Environ(), burnEnv+"=1")
	if out, err := child.CombinedOutput(); err != nil {
		t.Fatalf("child: %v: %s", err, out)
	}
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
			if int(p.ParentPid) != os.Getppid() || p.ChildrenCpuTimeMillis == 0 {
				t.Errorf("own process = %+v: want parent %d and the CPU time of the child it ran", p, os.Getppid())
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
