package cgroup

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"cairn.dev/cairn/pkg/fixture"
)

// spinEnv makes the test binary, started again by the tests, spin on CPU 0
// instead of running tests.
const spinEnv = "CAIRN_CGROUP_TEST_SPIN"

func TestMain(m *testing.M) {
	if os.Getenv(spinEnv) != "" {
		runtime.LockOSThread()
		var cpu0 unix.CPUSet
		cpu0.Set(0)
		if err := unix.SchedSetaffinity(0, &cpu0); err != nil {
			fmt.Fprintf(os.Stderr, "pinning to CPU 0: %v\n", err)
			os.Exit(2)
		}
		for {
			spins++
		}
	}
	os.Exit(m.Run())
}

// spins counts the loops of a spinning process: its busy work.
var spins uint64

// TestPrepareRefuses: a group is prepared only below a cgroup v2 hierarchy
// and with a weight cgroup v2 has.
func TestPrepareRefuses(t *testing.T) {
	dir := t.TempDir()
	if err := Prepare(dir+"/group", DefaultWeight); err == nil || !strings.Contains(err.Error(), "is not a cgroup v2 hierarchy") {
		t.Errorf("Prepare below a plain directory = %v, want an error saying it is no cgroup v2 hierarchy", err)
	}
	if err := Prepare("/nonexistent/group", DefaultWeight); err == nil {
		t.Error("Prepare below a missing directory succeeded")
	}
	for _, w := range []int{0, -1, 10001} {
		if err := Prepare(dir+"/group", w); err == nil || !strings.Contains(err.Error(), "not within 1 to 10000") {
			t.Errorf("Prepare with weight %d = %v, want an error naming the range", w, err)
		}
	}
}

// TestWeightsShareTheCPU: two processes spinning on one CPU, each in a
// group Prepare made below a common parent, one of weight 400 and one of
// 100, get that CPU about four to one. Prepare again changes nothing.
func TestWeightsShareTheCPU(t *testing.T) {
	root := "/sys/fs/cgroup"
	var st unix.Statfs_t
	if err := unix.Statfs(root, &st); err != nil || st.Type != unix.CGROUP2_SUPER_MAGIC {
		fixture.SkipOutsideNode(t, fmt.Sprintf("%s is not a cgroup v2 hierarchy (%v)", root, err))
	}
	parent := filepath.Join(root, fmt.Sprintf("cgroup-test-%d", os.Getpid()))
	heavy, light := filepath.Join(parent, "heavy"), filepath.Join(parent, "light")
	t.Cleanup(func() {
		for _, dir := range []string{heavy, light, parent} {
			if err := os.Remove(dir); err != nil && !os.IsNotExist(err) {
				t.Errorf("removing cgroup %s: %v", dir, err)
			}
		}
	})
	for range 2 {
		for _, g := range []struct {
			dir    string
			weight int
		}{{parent, DefaultWeight}, {heavy, 400}, {light, 100}} {
			if err := Prepare(g.dir, g.weight); err != nil {
				t.Fatal(err)
			}
			if got := readFile(t, filepath.Join(g.dir, "cpu.weight")); got != strconv.Itoa(g.weight) {
				t.Errorf("%s/cpu.weight = %s, want %d", g.dir, got, g.weight)
			}
		}
	}

	spin(t, heavy)
	spin(t, light)
	// Both spin from here on; give the scheduler a moment to settle.
	time.Sleep(200 * time.Millisecond)
	h0, l0 := usage(t, heavy), usage(t, light)
	time.Sleep(2 * time.Second)
	h, l := usage(t, heavy)-h0, usage(t, light)-l0
	t.Logf("over 2 s on one CPU: weight 400 got %v, weight 100 got %v", h, l)
	if l <= 0 || h < 2*l {
		t.Errorf("weight 400 got %v of the CPU and weight 100 got %v, want about four times as much", h, l)
	}
}

// spin starts the test binary spinning on CPU 0 in the group dir, checks
// that it runs there, and kills it when the test ends.
func spin(t *testing.T, dir string) {
	t.Helper()
	fd, err := syscall.Open(dir, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), spinEnv+"=1", "GOMAXPROCS=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting a spinning process in %s: %v", dir, err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	want := "0::" + strings.TrimPrefix(dir, "/sys/fs/cgroup")
	if got := readFile(t, fmt.Sprintf("/proc/%d/cgroup", cmd.Process.Pid)); got != want {
		t.Fatalf("the spinning process's cgroup is %q, want %q", got, want)
	}
}

// usage is the CPU time the processes of the group dir have had.
func usage(t *testing.T, dir string) time.Duration {
	t.Helper()
	for _, line := range strings.Split(readFile(t, filepath.Join(dir, "cpu.stat")), "\n") {
		if v, ok := strings.CutPrefix(line, "usage_usec "); ok {
			us, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("%s/cpu.stat: %q: %v", dir, line, err)
			}
			return time.Duration(us) * time.Microsecond
		}
	}
	t.Fatalf("%s/cpu.stat has no usage_usec", dir)
	return 0
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}
