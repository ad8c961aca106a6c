package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"cairn.dev/cairn/pkg/kmod"
	"cairn.dev/cairn/pkg/reaper"
)

// runPID1 is the whole life of PID 1: move the root off rootfs, mount,
// start the core, reap until the core ends, then finish the machine. It
// never returns.
func runPID1() {
	rootErr := leaveRootfs()
	errs := mountAll(bootMounts)
	con := openConsoles()
	for _, err := range errs {
		con.Printf("%v", err)
	}
	if rootErr != nil {
		con.Printf("%v; containers will not start", rootErr)
	}
	con.Printf("init started (kernel %s)", kmod.KernelRelease())
	con.Printf("version %s", version())
	// Without this the kernel reboots at once on ctrl-alt-del; with it, it
	// sends PID 1 SIGINT, and the node reboots cleanly.
	if err := unix.Reboot(unix.LINUX_REBOOT_CMD_CAD_OFF); err != nil {
		con.Printf("when disabling ctrl-alt-del: %v", err)
	}
	wd := newWatchdogFeeder(con)
	a, pause := superviseCore(con, wd)
	if pause {
		con.Printf("rebooting in %v", failurePause)
		time.Sleep(failurePause)
	}
	if a == poweroff {
		wd.disarm()
	}
	finish(con, a, pause, wd.hangReboot)
}

// superviseCore starts the core and reaps every child of PID 1 until the
// core has ended. SIGTERM and SIGINT are passed on to the core, which
// stops the node for a poweroff or reboot; should it not end within
// coreStopGrace after that, it is killed. It returns what to do next, and
// whether to pause first because something failed. It feeds wd meanwhile.
func superviseCore(con *consoles, wd *watchdogFeeder) (action, bool) {
	sigs := make(chan os.Signal, 32)
	// Before the core starts, so that its SIGCHLD cannot come too early.
	signal.Notify(sigs, unix.SIGCHLD, unix.SIGTERM, unix.SIGINT)
	defer signal.Stop(sigs)

	pid, err := startCore()
	if err != nil {
		con.Printf("%v", err)
		return reboot, true
	}
	wd.core = pid
	var requested *action
	var kill <-chan time.Time
	feed := time.NewTimer(wd.interval())
	defer feed.Stop()
	for {
		select {
		case <-feed.C:
			wd.tick()
			feed.Reset(wd.interval())
		case s := <-sigs:
			switch s {
			case unix.SIGCHLD:
				if ws, ended := reaper.Reap(pid); ended {
					a, pause, why := judgeCoreExit(ws, requested)
					if why != "" {
						con.Printf("%s", why)
					}
					return a, pause
				}
			case unix.SIGTERM, unix.SIGINT:
				a := signalAction(s)
				if requested == nil {
					requested = &a
					kill = time.After(coreStopGrace)
				}
				unix.Kill(pid, s.(syscall.Signal))
			}
		case <-kill:
			con.Printf("core did not stop within %v of the %s request; killing it", coreStopGrace, *requested)
			unix.Kill(pid, unix.SIGKILL)
		}
	}
}

// signalAction maps the signals PID 1 acts on to what they ask for: SIGINT
// is ctrl-alt-del, a reboot; SIGTERM a poweroff.
func signalAction(s os.Signal) action {
	if s == unix.SIGINT {
		return reboot
	}
	return poweroff
}

// startCore re-executes this binary as the core, with the console (or
// /dev/null) as its standard input and outputs.
func startCore() (int, error) {
	stdio, err := os.OpenFile("/dev/console", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		if stdio, err = os.OpenFile(os.DevNull, os.O_RDWR, 0); err != nil {
			return 0, fmt.Errorf("when starting core: no console and no %s: %w", os.DevNull, err)
		}
	}
	defer stdio.Close()
	fd := stdio.Fd()
	pid, err := syscall.ForkExec("/proc/self/exe", []string{coreArgv0}, &syscall.ProcAttr{
		Env:   os.Environ(),
		Files: []uintptr{fd, fd, fd},
	})
	if err != nil {
		return 0, fmt.Errorf("when starting core: %w", err)
	}
	return pid, nil
}

// judgeCoreExit decides, from how the core ended and what PID 1 was asked
// for meanwhile, how the machine goes on: the action, whether to pause
// first, and a line for the console explaining an unexpected end.
func judgeCoreExit(ws unix.WaitStatus, requested *action) (a action, pause bool, why string) {
	if requested != nil {
		return *requested, false, ""
	}
	switch {
	case ws.Exited() && ws.ExitStatus() == exitPoweroff:
		return poweroff, false, ""
	case ws.Exited() && ws.ExitStatus() == exitReboot:
		return reboot, false, ""
	case ws.Exited() && ws.ExitStatus() == exitFirmwareReboot:
		return firmwareReboot, false, ""
	case ws.Exited() && ws.ExitStatus() == exitFailed:
		return reboot, true, ""
	case ws.Exited():
		return reboot, true, fmt.Sprintf("core exited unexpectedly with status %d", ws.ExitStatus())
	case ws.Signaled():
		return reboot, true, fmt.Sprintf("core killed by signal %v", ws.Signal())
	}
	return reboot, true, fmt.Sprintf("core ended unexpectedly (wait status %#x)", uint32(ws))
}
