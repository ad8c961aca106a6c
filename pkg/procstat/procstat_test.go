package procstat

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestReadSelf(t *testing.T) {
	mem, procs, err := Read("/proc")
	if err != nil {
		t.Fatal(err)
	}
	if mem.TotalBytes == 0 || mem.AvailableBytes == 0 || mem.AvailableBytes > mem.TotalBytes {
		t.Errorf("memory %+v", mem)
	}
	for _, p := range procs {
		if p.PID == os.Getpid() {
			// A test binary has a heap and maps its own program.
			if p.ResidentBytes == 0 || p.Name == "" || p.AnonymousBytes == 0 || p.FileBytes == 0 {
				t.Errorf("this process: %+v, want a name and anonymous and file memory", p)
			}
			// The resident size is the kernel's running count, kept per
			// CPU and summed lazily, and the heap grows between the
			// readings; the proportional set walks the pages at once. So
			// it is compared with the larger of two readings, with a
			// margin for the counts a CPU has not yet added.
			pss, err := Proportional("/proc", p.PID)
			again, errAgain := ReadProcess("/proc", p.PID)
			rss := max(p.ResidentBytes, again.ResidentBytes)
			if err != nil || errAgain != nil || pss == 0 || pss > rss*11/10+1<<20 {
				t.Errorf("this process: proportional set %d bytes (%v) of %d resident (%v), want some, at most all", pss, err, rss, errAgain)
			}
			// The kernel counts the kinds and their sum apart, each a
			// moment later than the last.
			if sum := p.AnonymousBytes + p.FileBytes + p.SharedBytes; sum < p.ResidentBytes*9/10 || sum > p.ResidentBytes*11/10 {
				t.Errorf("this process: %d resident, but %d anonymous, file and shared together", p.ResidentBytes, sum)
			}
			return
		}
	}
	t.Errorf("this process (%d) is not among %d processes", os.Getpid(), len(procs))
}

// TestReadProcess reads this process by its ID, and a process that is not
// there.
func TestReadProcess(t *testing.T) {
	p, err := ReadProcess("/proc", os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if p.PID != os.Getpid() || p.Name == "" || p.ResidentBytes == 0 {
		t.Errorf("this process: %+v, want its ID, a name and resident memory", p)
	}
	if _, err := ReadProcess(t.TempDir(), 1); err == nil {
		t.Error("process 1 of an empty procfs: no error")
	}
}

// TestReadFixture reads a procfs of files: a name with spaces and
// parentheses, with each kind of resident memory; a process without
// resident memory (left out); one whose stat is malformed and one whose
// status is (both left out). The first has reaped children, whose times
// it carries.
func TestReadFixture(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("meminfo", "MemTotal:       2048 kB\nMemFree:   10 kB\nMemAvailable:   1024 kB\n")
	write("7/stat", "7 (a (b) c) S 1 7 7 0 -1 4194560 100 0 0 0 250 50 30 10 20 0 1 0 100 1000 10\n")
	write("7/status", "Name:\ta (b) c\nVmRSS:\t      12 kB\nRssAnon:\t       8 kB\nRssFile:\t       3 kB\nRssShmem:\t       1 kB\n")
	write("7/smaps_rollup", "00400000-7ffc0000 ---p 00000000 00:00 0  [rollup]\nRss:  12 kB\nPss:   5 kB\nPss_Anon:  4 kB\n")
	write("8/stat", "8 (idle) S 1 8 8 0 -1 0 0 0 0 0 1 1 0 0 20 0 1 0 100 0 0\n")
	write("8/status", "Name:\tidle\n")
	write("9/stat", "9 broken\n")
	write("9/status", "VmRSS:\t4 kB\n")
	write("10/stat", "10 (odd) S 1 8 8 0 -1 0 0 0 0 0 1 1 0 0 20 0 1 0 100 0 0\n")
	write("10/status", "VmRSS:\tmany kB\n")
	// Kernel threads (flags with PF_KTHREAD): one that has worked, one
	// that has not.
	write("11/stat", "11 (kworker/0:1-events) I 2 0 0 0 -1 69238880 0 0 0 0 30 470 0 0 20 0 1 0 100 0 0\n")
	write("11/status", "Name:\tkworker/0:1-events\n")
	write("12/stat", "12 (rcu_gp) I 2 0 0 0 -1 69238880 0 0 0 0 0 0 0 0 0 -20 1 0 10 0 0\n")
	write("12/status", "Name:\trcu_gp\n")
	mem, procs, err := Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	if mem.TotalBytes != 2048*1024 || mem.AvailableBytes != 1024*1024 {
		t.Errorf("memory %+v", mem)
	}
	want := Process{PID: 7, Name: "a (b) c", ResidentBytes: 12 << 10, AnonymousBytes: 8 << 10, FileBytes: 3 << 10, SharedBytes: 1 << 10,
		CPUTime: 3 * time.Second, ParentPID: 1, ChildrenCPUTime: 400 * time.Millisecond}
	if len(procs) != 1 || procs[0] != want {
		t.Errorf("processes %+v, want %+v", procs, want)
	}
	if pss, err := Proportional(dir, 7); err != nil || pss != 5<<10 {
		t.Errorf("Proportional(7) = %d, %v; want %d", pss, err, 5<<10)
	}
	_, withThreads, threads, err := ReadWithKernelThreads(dir)
	wantThread := Process{PID: 11, Name: "kworker/0:1-events", CPUTime: 5 * time.Second, ParentPID: 2, KernelThread: true}
	if err != nil || len(threads) != 1 || threads[0] != wantThread {
		t.Errorf("ReadWithKernelThreads: threads %+v, %v; want %+v alone", threads, err, wantThread)
	}
	if len(withThreads) != 1 || withThreads[0] != want {
		t.Errorf("ReadWithKernelThreads: processes %+v, want %+v, as Read", withThreads, want)
	}
	// A process without smaps_rollup has ended, or never was.
	if pss, err := Proportional(dir, 8); err == nil {
		t.Errorf("Proportional(8) = %d, want an error: it has no smaps_rollup", pss)
	}
}

// TestReadCPU reads a node's CPU time from a /proc/stat of two CPUs and
// its uptime: busy is the CPUs' time since boot that was neither idle
// (iowait counted) nor stolen, however little the sampled user and system
// times say. A stat without the whole cpu lines, or a malformed uptime, is
// an error.
func TestReadCPU(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("stat", "cpu  100 20 300 4000 50 6 7 8 90 0\n"+
		"cpu0 50 10 150 2000 25 3 4 4 45 0\n"+
		"cpu1 50 10 150 2000 25 3 3 4 45 0\n"+
		"intr 12345 0 1\nctxt 999\nbtime 1700000000\n")
	write("uptime", "25.00 39.90\n")
	cpu, err := ReadCPU(dir)
	if err != nil {
		t.Fatal(err)
	}
	// 2 CPUs × 25 s = 50 s, of which 40.5 s idle and 0.08 s stolen.
	want := CPU{Count: 2, Busy: 9420 * time.Millisecond, Idle: 40500 * time.Millisecond, Stolen: 80 * time.Millisecond}
	if cpu != want {
		t.Errorf("ReadCPU = %+v, want %+v", cpu, want)
	}
	write("uptime", "soon 1\n")
	if cpu, err := ReadCPU(dir); err == nil {
		t.Errorf("ReadCPU with a malformed uptime = %+v, want an error", cpu)
	}
	write("uptime", "25.00 39.90\n")
	write("stat", "cpu  1 2 3\ncpu0 1 2 3\n")
	if cpu, err := ReadCPU(dir); err == nil {
		t.Errorf("ReadCPU of a short cpu line = %+v, want an error", cpu)
	}
	// The real one, on the machine the test runs on.
	if cpu, err := ReadCPU("/proc"); err != nil || cpu.Count < 1 || cpu.Busy <= 0 || cpu.Idle <= 0 {
		t.Errorf("ReadCPU(/proc) = %+v, %v", cpu, err)
	}
}
