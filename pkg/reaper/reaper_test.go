package reaper

import (
	"os"
	"syscall"
	"testing"
	"time"
)

// startShell starts sh -c script as a child of the test, or skips the
// test on a machine without a shell.
func startShell(t *testing.T, script string) int {
	t.Helper()
	var sh string
	for _, p := range []string{"/bin/sh", "/usr/bin/sh"} {
		if _, err := os.Stat(p); err == nil {
			sh = p
			break
		}
	}
	if sh == "" {
		t.Skip("no shell to start children with")
	}
	pid, err := syscall.ForkExec(sh, []string{"sh", "-c", script}, &syscall.ProcAttr{Files: []uintptr{0, 1, 2}})
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// TestReap starts real children, one of which plays the process PID 1
// started, and checks that reaping finds its exit status among the
// others'.
func TestReap(t *testing.T) {
	startShell(t, "exit 0")
	core := startShell(t, "exit 82")
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if ws, ended := Reap(core); ended {
			if !ws.Exited() || ws.ExitStatus() != 82 {
				t.Errorf("wait status %#x, want exit status 82", uint32(ws))
			}
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("Reap never saw the child end")
}

// TestReapFor waits for a child to end and reaps it, and gives up on one
// that outlives the wait.
func TestReapFor(t *testing.T) {
	startShell(t, "exit 0")
	if !reapFor(10 * time.Second) {
		t.Errorf("reapFor(10s) = false with a child that exits at once, want true")
	}
	pid := startShell(t, "exec sleep 10")
	defer func() {
		syscall.Kill(pid, syscall.SIGKILL)
		reapFor(10 * time.Second)
	}()
	if reapFor(50 * time.Millisecond) {
		t.Errorf("reapFor(50ms) = true with a child that sleeps 10s, want false")
	}
}
