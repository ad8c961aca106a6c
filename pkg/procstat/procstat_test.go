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
			if p.ResidentBytes == 0 || p.Name == "" {
				t.Errorf("this process: %+v", p)
			}
			return
		}
	}
	t.Errorf("this process (%d) is not among %d processes", os.Getpid(), len(procs))
}

// TestReadFixture reads a procfs of files: a name with spaces and
// parentheses, a process without resident memory (left out), and one
// whose files are malformed (left out).
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
	write("7/stat", "7 (a (b) c) S 1 7 7 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 1 0 100 1000 10\n")
	write("7/statm", "100 3 1 1 0 1 0\n")
	write("8/stat", "8 (idle) S 1 8 8 0 -1 0 0 0 0 0 1 1 0 0 20 0 1 0 100 0 0\n")
	write("8/statm", "0 0 0 0 0 0 0\n")
	write("9/stat", "9 broken\n")
	write("9/statm", "1 1\n")
	mem, procs, err := Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	if mem.TotalBytes != 2048*1024 || mem.AvailableBytes != 1024*1024 {
		t.Errorf("memory %+v", mem)
	}
	page := uint64(os.Getpagesize())
	if len(procs) != 1 || procs[0].PID != 7 || procs[0].Name != "a (b) c" || procs[0].ResidentBytes != 3*page || procs[0].CPUTime != 3*time.Second {
		t.Errorf("processes %+v, want process 7 'a (b) c', 3 pages, 3 s", procs)
	}
}
