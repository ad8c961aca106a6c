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
// the ESP's image when this boot came from it, kexec.go),
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
// # Modules: coldplug, and modprobe mode
//
// Before its tree starts, the core loads the modules the machine's devices
// ask for (coldplug: sysfs modaliases matched against modules.alias) and
// the few the node always needs (explicitModules). Everything else the
// kernel asks for by name when it needs it: a cipher for dm-crypt
// ("crypto-xts", and "crypto-ecb" on a CPU without AES-NI), a filesystem
// ("fs-xfs"), a device-mapper target ("dm-crypt"), netfilter pieces
// ("nft-chain-2-nat"), link types ("rtnl-link-vxlan"). It asks through
// request_module, which runs the program named in
// /proc/sys/kernel/modprobe as "<program> -q -- <name>" and waits for it
// to exit. That program is this binary a third time:
//
//	kernel: request_module("crypto-ecb")
//	  │ runs /sbin/modprobe -q -- crypto-ecb   (a link to /init that the
//	  │                                         core makes, and names in the
//	  ▼                                         sysctl, before coldplug)
//	/init, argv[0] "modprobe": the name is a module (modules.dep) or
//	  matches alias patterns (modules.alias) ─▶ load it and its
//	  dependencies (finit_module; EEXIST is as good) ─▶ one line in the
//	  kernel log ─▶ exit 0 (served) or 1 (nothing matches, or no module
//	  of the name loads)
//
// The line, "cairn-modprobe: loaded ecb (for crypto-ecb) in 0.10s",
// reaches the console. Names no module provides ("crypto-xts(aes)", which
// the kernel tries before "crypto-xts") and modules that find no device
// (aesni_intel without AES-NI) stay at debug level, in dmesg only. A run
// ends within 10 seconds whatever hangs, as the kernel's caller waits for
// it. Tools that run modprobe themselves (iptables, kube-proxy) reach the
// same link.
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
//	main.go      picks the mode: PID 1, core or modprobe
//	reaper.go    PID 1: start the core, reap, forward signals, judge the exit
//	power.go     PID 1: the end of the machine (kill, sync, unmount, reboot)
//	kexec.go     PID 1: loading the ESP's image for a reboot without firmware
//	mounts.go    the filesystems mounted at boot, unmounting at the end
//	core.go      the core: log tree, coldplug, supervisor, shutdown request
//	coldplug.go  module loading through pkg/kmod
//	modprobe.go  modprobe mode: the kernel's requests for modules by name
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
//	testservices.go  test-only echo server and client (cairn.test.echo,
//	             cairn.test.dial)
package main
