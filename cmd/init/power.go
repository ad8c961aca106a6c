package main

import (
	"fmt"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"cairn.dev/cairn/node/kexec"
	"cairn.dev/cairn/node/network"
	"cairn.dev/cairn/node/update"
	"cairn.dev/cairn/pkg/reaper"
)

// An action is how the machine ends.
type action int

const (
	poweroff action = iota
	// reboot kexecs into the ESP's image when it can (node/kexec).
	reboot
	// firmwareReboot always reboots through the firmware.
	firmwareReboot
)

func (a action) String() string {
	switch a {
	case reboot:
		return "reboot"
	case firmwareReboot:
		return "reboot through the firmware"
	}
	return "poweroff"
}

// Exit codes of the core, which tell PID 1 what to do next. They stay clear
// of the small codes a Go program uses on its own (2 for a panic).
const (
	exitPoweroff = 80 // a shutdown was asked for: power off
	exitReboot   = 81 // a reboot was asked for
	exitFailed   = 82 // the root runnable died; the core said why
	// exitFirmwareReboot: a reboot through the firmware was asked for.
	exitFirmwareReboot = 83
)

func (a action) exitCode() int {
	switch a {
	case reboot:
		return exitReboot
	case firmwareReboot:
		return exitFirmwareReboot
	}
	return exitPoweroff
}

// How long PID 1 lets the rest of the system's processes end on SIGTERM
// before it kills them, and how long it pauses before a reboot that
// follows a failure, so that a person can read why.
const (
	killGrace     = 3 * time.Second
	failurePause  = 5 * time.Second
	stopDeadline  = 15 * time.Second // core: stopping the supervision tree
	coreStopGrace = 30 * time.Second // PID 1: the core acting on a signal
)

// finish ends the machine: every process left gets SIGTERM, then SIGKILL,
// filesystems are synced, the network links taken down, filesystems
// unmounted, and the kernel powers off or reboots. A reboot that was
// asked for (not one after a failure, nor one through the firmware)
// kexecs into the ESP's image when it can (node/kexec), unless Secure
// Boot is on: then only the firmware starts the next image, having
// checked it. It never returns. hang (a test hook) halts the kernel
// instead of a reboot.
func finish(con *consoles, a action, failed, hang bool) {
	hang = hang && a != poweroff
	if !reaper.KillAll(killGrace) {
		con.Printf("processes stuck in the kernel outlived SIGKILL for %v; going on with the %s", killGrace, a)
	}
	unix.Sync()
	con.Printf("filesystems synced")
	viaKexec := false
	if a == reboot && !failed {
		switch why := firmwareOnly(); {
		case why != "":
			con.Printf("rebooting through the firmware: %s", why)
		case kexec.Loaded():
			viaKexec = true
			con.Printf("the core loaded the ESP's image for kexec while its services stopped")
		default:
			start := time.Now()
			if how, err := kexec.Load(); err != nil {
				con.Printf("rebooting through the firmware: %v", err)
			} else {
				viaKexec = true
				con.Printf("loaded the ESP's image for kexec in %v (%s)", time.Since(start).Round(time.Millisecond), how)
			}
		}
	}
	// Before the kernel shuts the devices down under a network stack
	// that may still use them (node/network.TakeLinksDown).
	down, err := network.TakeLinksDown()
	if len(down) > 0 {
		con.Printf("network links down: %s", strings.Join(down, ", "))
	}
	if err != nil {
		con.Printf("%v", err)
	}
	for _, err := range unmountAll() {
		con.Printf("%v", err)
	}
	con.Printf("unmounted filesystems")
	cmd := unix.LINUX_REBOOT_CMD_POWER_OFF
	switch {
	case hang:
		// The kernel shuts the devices down and stops the CPU, as if it
		// hung there; the watchdog, which it leaves running, resets it.
		con.Printf("test hook: halting the kernel instead of the %s", a)
		cmd = unix.LINUX_REBOOT_CMD_HALT
	case viaKexec:
		con.Printf("rebooting (kexec into the ESP's image, without the firmware)")
		if err := unix.Reboot(unix.LINUX_REBOOT_CMD_KEXEC); err != nil {
			con.Printf("kexec failed: %v; rebooting through the firmware", err)
		}
		cmd = unix.LINUX_REBOOT_CMD_RESTART
	case a == reboot || a == firmwareReboot:
		con.Printf("rebooting")
		cmd = unix.LINUX_REBOOT_CMD_RESTART
	default:
		con.Printf("powering off")
	}
	err = unix.Reboot(cmd)
	// PID 1 must not exit, or the kernel panics; if reboot(2) failed there
	// is nothing left to do but say so and wait.
	con.Printf("%s failed: %v; halting here", a, err)
	for {
		time.Sleep(time.Hour)
	}
}

// loadKexecEarly loads the ESP's image for a reboot's kexec in the core,
// while the supervision tree stops, rather than in PID 1 once it stopped
// (finish): kexec_file_load takes 1.5 s of an idle emulated CPU, 3 to
// 4 s of a busy one. Nearly all of it is the kernel's segment, which spans
// the kernel's whole decompression area (its init_size, 67 MB for
// Debian's kernel): the kernel allocates and clears those pages and hashes
// all of them for purgatory, zeros included; the initramfs's 16 MB take
// a tenth of it, and checking the kernel's signature nothing measurable.
// PID 1 then finds the image loaded. One that cannot be loaded here is
// tried again there.
func loadKexecEarly(con *consoles) {
	if firmwareOnly() != "" {
		return // PID 1 says why
	}
	start := time.Now()
	how, err := kexec.Load()
	if err != nil {
		con.Printf("the ESP's image not loaded for kexec while the services stop (PID 1 tries again): %v", err)
		return
	}
	con.Printf("loaded the ESP's image for kexec while the services stop, in %v (%s)", time.Since(start).Round(time.Millisecond), how)
}

// firmwareOnly says why a reboot that was asked for must go through the
// firmware, or "" when it may kexec.
func firmwareOnly() string {
	if trial := trialBoot(); trial != "" {
		return trial
	}
	if secureBoot() {
		return "Secure Boot is on, and the firmware checks the UKI's signature (the locked-down kernel loads no kernel it cannot verify)"
	}
	return ""
}

// trialBoot says, when the firmware booted this machine once (BootNext)
// to try a system slot, that a reboot must go through the firmware: kexec
// loads the removable media path's image, the default slot's, and the
// firmware's default is what follows a trial that did not prove itself.
func trialBoot() string {
	fw := update.Firmware{Vars: efiVars.target}
	slot, isDefault, ok, err := fw.Booted()
	if err != nil || !ok || isDefault {
		return ""
	}
	return fmt.Sprintf("the firmware booted slot %s once, for a trial, and its default follows it", slot)
}
