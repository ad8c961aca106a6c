// Command init is Cairn's PID 1, the first and only program the kernel
// starts. It mounts the kernel's filesystems, loads the modules the
// hardware needs and those the kernel asks for, runs the node's
// supervision tree and, at the end, stops everything cleanly and powers
// the machine off or reboots it.
//
// # Two processes from one binary
//
// PID 1 must reap every orphaned process of the system, which means calling
// wait4(-1) for any child. Go's os/exec waits for the children it starts by
// their PID, and a PID 1 that reaps everything steals their exit statuses:
// exec.Cmd.Wait then fails at random. So the binary runs twice:
//
//	kernel
//	  │ execs /init
//	  ▼
//	┌─────────────────────────────┐  SIGTERM (kill 1)  ─▶ poweroff
//	│ PID 1, reaper mode          │  SIGINT (ctrl-alt-del) ─▶ reboot
//	│  mounts /proc /sys /dev ... │──── forwards both ─────────────┐
//	│  wait4(-1) on SIGCHLD       │◀── orphans, reparented ──┐     │
//	│  acts on the core's exit:   │                          │     │
//	│  kill rest, sync, unmount,  │◀─ exit code ─┐           │     ▼
//	│  reboot(2)                  │              │  ┌─────────────────────┐
//	└──────────────┬──────────────┘              └──│ core (child of PID 1)│
//	               │ re-executes /proc/self/exe     │ coldplug modules     │
//	               │ as argv[0] "cairn-core"        │ supervisor tree:     │
//	               └──────────────────────────────▶ │  root ─ power ─ ...  │
//	                                                │ os/exec works here   │
//	                                                └──────────────────────┘
//
// PID 1 does nothing that can fail in interesting ways: mount, start the
// core, reap, forward signals, and finish the machine. Everything else
// (module loading, the log tree, the runnables) lives in the core, whose
// exit code tells PID 1 what to do: exitPoweroff, exitReboot (kexec into
// the ESP's image when this boot came from it, node/kexec; the core loads
// the image while its tree stops),
// exitFirmwareReboot, or exitFailed (the root runnable died; reboot through
// the firmware after a pause). Any other end
// of the core, a crash or a kill, is unexpected and also reboots after a
// pause. PID 1 never returns: if it did, the kernel would panic.
//
// Shutting down runs across both. The power button's sources are opened
// before the tree starts, so a press during boot waits to be read instead
// of being lost:
//
//	power button, or SIGTERM/SIGINT forwarded by PID 1
//	  ─▶ core: "stopping for poweroff", cancel the tree, wait ≤15s,
//	     "supervisor stopped", exit(exitPoweroff)
//	  ─▶ PID 1: SIGTERM then SIGKILL to what is left, sync, unmount
//	     newest mount first, reboot(2)
//
// # Modules, and modprobe mode
//
// Before its tree starts, the core loads the few modules it needs itself;
// the storage child loads the rest in steps, as the disks are mounted.
// What loads when is node/modules' policy. The kernel's own requests for
// modules by name (request_module) run /sbin/modprobe, a link to this
// binary that the core makes: run under that name, main hands the
// request to node/modules (RunModprobe), a third mode of the binary.
//
// # Console
//
// Phase lines ("cairn: supervisor started") go straight to /dev/ttyS0 and
// /dev/tty0, each opened on its own (writing /dev/console reaches only one
// of them), stamped like the kernel's own lines with the time since boot.
// Once the log tree exists, every entry of it at INFO or above
// (cairn.log=warning on the kernel command line raises that) goes to both
// consoles as well.
//
// # Files
//
//	main.go      picks the mode: PID 1, core or modprobe (node/modules)
//	reaper.go    PID 1: start the core, reap (pkg/reaper), forward signals,
//	             judge the exit
//	power.go     PID 1: the end of the machine (kill, sync, unmount, reboot)
//	mounts.go    the filesystems mounted at boot, unmounting at the end
//	core.go      the core: log tree, boot modules, supervisor, shutdown
//	             request
//	root.go      the root runnable and its list of children
//	button.go    the power child: power button (evdev, or ACPI netlink
//	             without evdev) and forwarded signals
//	console.go   phase lines on the consoles
//	flags.go     cairn.* flags of the kernel command line
//	network.go   the network child: DHCP, the external address on the
//	             consoles
//	storage.go   the storage child: /system, ESP, /ephemeral and, with
//	             test-only keys, the data partition at /data
//	system.go    the system slot and verity flags, and the storage child's
//	             mount of the verified system partition at /system
//	timesync.go  the timesync child: the clock's state on the consoles
//	cluster.go   the parameters, enrolment, node management and log
//	             store children
//	update.go    the update child: the installer, the judgement of this
//	             boot's system slot
//	rollout.go   the update child's part in cluster rollouts: install the
//	             desired release, reboot for its trial, report how it went
//
// The test hooks (cairn.test.* flags, test services) are node/testhooks',
// built in only with the tag cairntest; the core wires them in.
package main
