package main

import (
	"errors"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"cairn.dev/cairn/node/testhooks"
	"cairn.dev/cairn/pkg/cmdline"
	"cairn.dev/cairn/pkg/watchdog"
)

// PID 1 feeds the machine's hardware watchdog, once its driver is loaded
// (qemu's i6300esb, Intel's iTCO on real boards; the storage child loads
// it with the system partition's modules). A kernel or a PID 1 that hangs
// stops feeding it, and the device resets the machine through the
// firmware: during the trial of a system slot, the firmware's default is
// the last good slot (docs/updates.md). A hang before the driver is
// loaded, a few seconds into the boot, is not caught.
const (
	watchdogPath = "/dev/watchdog0"
	// watchdogTimeout is how long, in seconds, the device waits for PID 1
	// before it resets the machine: long enough for a PID 1 starved of
	// CPU under emulation, short enough that a hung trial comes back
	// within a couple of minutes.
	watchdogTimeout = 60
	// watchdogFeed is how often PID 1 feeds it.
	watchdogFeed = 10 * time.Second
	// watchdogLook is how often PID 1 looks for it until it appears,
	// for the first watchdogEarly of the boot, when the driver is loaded:
	// a hang soon after must find it armed. Later, and on machines
	// without one, it looks at every watchdogFeed.
	watchdogLook  = time.Second
	watchdogEarly = 2 * time.Minute
)

// watchdogFeeder arms the watchdog when it appears and feeds it.
type watchdogFeeder struct {
	con  *consoles
	path string
	dev  *watchdog.Device
	// starve stops the feeding once armed and freezes the core (pid
	// core): a test hook, a hung machine as the watchdog and the cluster
	// see it.
	starve bool
	core   int
	// hangReboot asks PID 1 for a reboot once armed, which finish ends
	// by halting the kernel: a test hook, a machine that hangs on its
	// way down.
	hangReboot bool
	// said is set once an error opening the device was said.
	said bool
	// start is when the feeder was made, at PID 1's start.
	start time.Time
}

func newWatchdogFeeder(con *consoles) *watchdogFeeder {
	c, _ := cmdline.Read()
	return &watchdogFeeder{con: con, path: watchdogPath, starve: testhooks.StarveWatchdog(c), hangReboot: testhooks.HangReboot(c), start: time.Now()}
}

// interval is how long until the next tick.
func (w *watchdogFeeder) interval() time.Duration {
	if w.dev == nil && time.Since(w.start) < watchdogEarly {
		return watchdogLook
	}
	return watchdogFeed
}

// tick arms the device if it is there and was not armed yet, or feeds it.
func (w *watchdogFeeder) tick() {
	if w.dev != nil {
		if w.starve {
			return
		}
		if err := w.dev.Feed(); err != nil && !w.said {
			w.con.Printf("%v", err)
			w.said = true
		}
		return
	}
	d, err := watchdog.Open(w.path, watchdogTimeout)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return
	case err != nil:
		if !w.said {
			w.con.Printf("watchdog %s not armed: %v", w.path, err)
			w.said = true
		}
		return
	}
	w.dev = d
	reboot := "the kernel stops it in a reboot"
	if watchdog.KeptThroughReboot() {
		reboot = "and when a reboot hangs"
	}
	w.con.Printf("watchdog armed (%s): the machine resets when PID 1 is not heard for %d s, %s", d.Identity, d.Timeout, reboot)
	if w.starve {
		w.con.Printf("test hook: PID 1 stops feeding the watchdog and freezes the core, as a hung machine would")
		if w.core > 0 {
			unix.Kill(w.core, unix.SIGSTOP)
		}
	}
	if w.hangReboot {
		w.con.Printf("test hook: PID 1 asks for a reboot, and halts the kernel at its end instead of restarting the machine")
		unix.Kill(os.Getpid(), unix.SIGINT)
	}
}

// disarm stops the device before a poweroff, where a slow end must not
// turn into a reset. A reboot leaves it armed, and the kernel too
// (node/modules gives the watchdog core stop_on_reboot=0): a machine that
// hangs on its way down, in PID 1 or in a driver's shutdown, is reset.
func (w *watchdogFeeder) disarm() {
	if w.dev == nil {
		return
	}
	if err := w.dev.Disarm(); err != nil {
		w.con.Printf("when disarming the watchdog: %v", err)
	}
	w.dev = nil
}
