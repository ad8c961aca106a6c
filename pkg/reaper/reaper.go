// Package reaper collects the children of a process that must wait for
// every one of them, as PID 1 must: the kernel reparents every orphan of
// the system to it, and a child that is not waited for stays a zombie.
// Reap collects the children that have exited, telling one of them (the
// process PID 1 started itself) apart; KillAll ends every other process
// of the system and collects them, for a machine that is going down.
//
// Waiting for any child steals the exit statuses os/exec waits for by
// PID: a process that uses this package should start its children with
// syscall.ForkExec, as cmd/init does, and leave os/exec to another
// process.
package reaper

import (
	"errors"
	"time"

	"golang.org/x/sys/unix"
)

// Reap reaps every child that has exited, without waiting for any. If one
// of them was pid, it returns pid's wait status and true.
func Reap(pid int) (unix.WaitStatus, bool) {
	var status unix.WaitStatus
	ended := false
	for {
		var ws unix.WaitStatus
		p, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || p <= 0 {
			return status, ended
		}
		if p == pid {
			status, ended = ws, true
		}
	}
}

// KillAll sends SIGTERM to every process but the caller's (and the
// kernel's own), reaps them for up to grace, then kills the rest with
// SIGKILL and reaps them for as long again. It reports whether every
// process ended: one blocked in the kernel (on a device that no longer
// answers) ignores even SIGKILL, and must not keep the machine from
// going down.
func KillAll(grace time.Duration) bool {
	if err := unix.Kill(-1, unix.SIGTERM); errors.Is(err, unix.ESRCH) {
		return true // nothing else runs
	}
	if reapFor(grace) {
		return true
	}
	unix.Kill(-1, unix.SIGKILL)
	return reapFor(grace)
}

// reapFor reaps children for up to d, and reports whether none is left.
func reapFor(d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		if !reapAny() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// reapAny reaps every exited child and reports whether children remain.
func reapAny() bool {
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		switch {
		case errors.Is(err, unix.ECHILD):
			return false
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil, pid == 0:
			return true
		}
	}
}
