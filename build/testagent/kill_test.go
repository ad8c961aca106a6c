package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
)

// TestKill kills a process by the name it was started under, and only it.
func TestKill(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatalf("this test runs sleep: %v", err)
	}
	// A name no other process on the machine goes by, short enough for
	// the kernel to keep whole.
	name := fmt.Sprintf("akill%d", os.Getpid())
	path := filepath.Join(t.TempDir(), name)
	if err := os.Symlink(sleep, path); err != nil {
		t.Fatal(err)
	}
	victim := exec.Command(path, "600")
	bystander := exec.Command(sleep, "600")
	for _, c := range []*exec.Cmd{victim, bystander} {
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
	}
	defer bystander.Process.Kill()

	if err := kill(name); err != nil {
		t.Fatalf("kill(%q): %v", name, err)
	}
	var exit *exec.ExitError
	if err := victim.Wait(); !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Errorf("%s ended with %v, want killed by SIGKILL", name, err)
	}
	// Alive, not a zombie: procstat lists it.
	if pids, err := named("sleep"); err != nil || !slices.Contains(pids, bystander.Process.Pid) {
		t.Errorf("sleep, named otherwise, was killed too (running sleeps: %v, %v)", pids, err)
	}
	if err := kill(name); err == nil {
		t.Errorf("kill(%q) with no such process left: no error", name)
	}
}
