// Package modules is the node's policy for kernel modules: which modules
// it loads when, from which module directory, and how it answers the
// kernel's requests for modules by name. pkg/kmod does the loading; this
// package decides what to load.
//
// # Coldplug, in steps
//
// Before its tree starts, the core loads the few modules it needs itself
// (LoadBoot). The storage child then loads, in steps (Steps), the modules
// the machine's devices ask for (coldplug: sysfs modaliases matched
// against modules.alias) and those the node always needs: the disks' from
// the initramfs, every device's from the system partition once it is
// mounted, and the data partition's once the ESP is (steps.go).
//
// # Modprobe mode
//
// Everything else the kernel asks for by name when it needs it: a cipher
// for dm-crypt ("crypto-xts", and "crypto-ecb" on a CPU without AES-NI),
// a filesystem ("fs-xfs"), a device-mapper target ("dm-crypt"), netfilter
// pieces ("nft-chain-2-nat"), link types ("rtnl-link-vxlan"). It asks
// through request_module, which runs the program named in
// /proc/sys/kernel/modprobe as "<program> -q -- <name>" and waits for it
// to exit. That program is the node binary, /init, run as modprobe
// (RunModprobe):
//
//	kernel: request_module("crypto-ecb")
//	  │ runs /sbin/modprobe -q -- crypto-ecb   (a link to /init that
//	  │                                         LoadBoot makes, and names
//	  ▼                                         in the sysctl)
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
package modules
