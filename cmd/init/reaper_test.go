package main

import (
	"os"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// exited and killed make wait statuses as the kernel reports them.
func exited(code int) unix.WaitStatus      { return unix.WaitStatus(code << 8) }
func killed(s unix.Signal) unix.WaitStatus { return unix.WaitStatus(s) }

func TestJudgeCoreExit(t *testing.T) {
	r := reboot
	for _, tc := range []struct {
		name      string
		ws        unix.WaitStatus
		requested *action
		want      action
		wantPause bool
		wantWhy   string
	}{
		{"poweroff", exited(exitPoweroff), nil, poweroff, false, ""},
		{"reboot", exited(exitReboot), nil, reboot, false, ""},
		{"reboot through the firmware", exited(exitFirmwareReboot), nil, firmwareReboot, false, ""},
		{"root failed", exited(exitFailed), nil, reboot, true, ""},
		{"go panic", exited(2), nil, reboot, true, "core exited unexpectedly with status 2"},
		{"clean exit", exited(0), nil, reboot, true, "core exited unexpectedly with status 0"},
		{"killed", killed(unix.SIGKILL), nil, reboot, true, "core killed by signal killed"},
		{"killed after ctrl-alt-del", killed(unix.SIGKILL), &r, reboot, false, ""},
	} {
		a, pause, why := judgeCoreExit(tc.ws, tc.requested)
		if a != tc.want || pause != tc.wantPause || why != tc.wantWhy {
			t.Errorf("%s: judgeCoreExit(%#x) = %v, %v, %q, want %v, %v, %q",
				tc.name, uint32(tc.ws), a, pause, why, tc.want, tc.wantPause, tc.wantWhy)
		}
	}
}

func TestSignalAction(t *testing.T) {
	if got := signalAction(unix.SIGINT); got != reboot {
		t.Errorf("signalAction(SIGINT) = %v, want reboot", got)
	}
	if got := signalAction(unix.SIGTERM); got != poweroff {
		t.Errorf("signalAction(SIGTERM) = %v, want poweroff", got)
	}
}

// TestReapUntil starts real children, one of which plays the core, and
// checks that reaping finds the core's exit status among the others'.
func TestReapUntil(t *testing.T) {
	sh, err := lookShell()
	if err != nil {
		t.Skipf("no shell to start children with: %v", err)
	}
	attr := &syscall.ProcAttr{Files: []uintptr{0, 1, 2}}
	if _, err := syscall.ForkExec(sh, []string{"sh", "-c", "exit 0"}, attr); err != nil {
		t.Fatal(err)
	}
	core, err := syscall.ForkExec(sh, []string{"sh", "-c", "exit 82"}, attr)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if ws, ended := reapUntil(core); ended {
			if !ws.Exited() || ws.ExitStatus() != exitFailed {
				t.Errorf("core wait status %#x, want exit status %d", uint32(ws), exitFailed)
			}
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("reapUntil never saw the core end")
}

func lookShell() (string, error) {
	for _, p := range []string{"/bin/sh", "/usr/bin/sh"} {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", os.ErrNotExist
}
