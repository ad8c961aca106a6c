// Package launch boots one Cairn node in qemu for tests, benchmarks and
// people (cmd/launch-cluster). It owns everything a node needs on the host
// and takes all of it away again: a throw-away disk overlay, a private copy
// of the firmware's variable store (or one kept across launches), an
// optional software TPM, the files handed to the guest through fw_cfg, and
// the qemu process itself.
//
//	                Launch(ctx, Config, options...)
//	                             │
//	state dir (temp) ────────────┼────────────────────────────────────┐
//	│ disk.qcow2    overlay, backed by the raw image (never written), │
//	│               DiskSize large: room for the data partition       │
//	│ OVMF_VARS.fd  this node's own copy of the variable store (or    │
//	│               WithVarStore's file, kept across launches)        │
//	│ fwcfg-N       node parameters and other fw_cfg files            │
//	│ swtpm/        TPM state (or WithTPMState's) and control socket  │
//	│               ◀── swtpm process                                 │
//	│ qmp.sock      QMP: system_powerdown, quit                       │
//	│ console.log   the raw serial console                            │
//	└────────────────────────────┬────────────────────────────────────┘
//	                             ▼
//	        qemu-system-x86_64 (own process group, dies with its parent)
//	            │ serial console (stdout)             │ stderr
//	            ▼                                     ▼
//	Console: every line with its host time     tail kept for errors
//	    ──▶ WaitFor(ctx, Mark(marker.Name, fields...), Substring("...")
//	                     or *regexp.Regexp)
//
// Tests wait on the markers of node/marker, the facts a node states for
// machines to read, never on the wording of its log lines; Substring and
// regular expressions are for the kernel, the firmware and /init's console
// protocol ("cairn: init started", ...).
//
// # Firmware
//
// The normal path boots the image the way a machine does: q35 with OVMF,
// which finds the unified kernel image on the disk's EFI system partition.
// WithDirectBoot adds a fast path next to it for tests that need to change
// the kernel command line: qemu's own BIOS loads a kernel and initramfs
// given on its command line, and the disk, if any, is still attached.
//
// The firmware keeps its variables (boot entries, BootOrder, BootNext) in a
// variable store that qemu maps as writable flash. Each launch gets a fresh
// copy of the template, unless WithVarStore names a file that outlives the
// node: then a node launched again finds the boot entries it wrote, as a
// machine does after a power cut. A reboot inside one qemu process keeps
// the flash either way.
//
// # Lifetime
//
// A Node runs until the guest powers off, Powerdown or Quit ask it to stop,
// Kill ends it, or Close tears it down. qemu and swtpm run in process groups
// of their own (so a Ctrl-C meant for the launcher does not reach them) and
// receive SIGKILL when the launcher dies, through the parent-death signal.
// Close is safe to call many times and from t.Cleanup. State directories of
// launchers that were killed before they could clean up are removed by the
// next Launch.
//
// # Timings
//
// Each console Line carries the host time it was received and, for kernel
// and Cairn lines, the guest uptime printed at its start. BootTimings
// splits a boot into its phases from those two clocks.
package launch
