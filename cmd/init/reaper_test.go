package main

import (
	"testing"

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
