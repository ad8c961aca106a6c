// Package kmod loads Linux kernel modules: the ones a machine's hardware
// asks for (coldplug), the ones the kernel asks for by name, and ones
// named explicitly. It reads the text indexes that depmod writes next to
// the modules and loads with finit_module(2); it needs no modprobe binary,
// no udev and no C library.
//
// Coldplug works from what the kernel already knows about the machine.
// Every device the kernel has found carries a modalias in sysfs, a string
// such as "pci:v00001AF4d00001000sv00001AF4sd00000001bc02sc00i00" that
// describes it. modules.alias maps glob patterns over those strings to the
// modules that drive the matching devices:
//
//	Devices: /sys/devices/**/modalias ──▶ AliasIndex.Match ──▶ module names
//	  once, then uevents ▲                (modules.alias,        │
//	                     │                 indexed by prefix)     ▼
//	                     │                          Loader.Load: skip builtin and
//	                     │                          loaded ones, load modules.dep
//	                     │                          dependencies first, then
//	                     └── new devices appear ◀── finit_module(2) each file
//	                         (e.g. virtio_pci creates
//	                          virtio devices): ask Devices again
//
// Loading a bus driver makes the kernel find the devices on that bus, which
// bring modaliases of their own, so Coldplug asks Devices again after every
// round that loaded something, until it brings no new modalias. Devices
// from WatchDevices walks sysfs only once and then reads the kernel's
// uevents ("add" with MODALIAS=...), which the kernel sends while the
// driver's load adds the devices: each walk costs a tenth of a second and
// more under software emulation, and a boot asks half a dozen times.
//
// # Requests by name
//
// The kernel also asks for modules by name when it needs one, through
// request_module: a cipher ("crypto-ecb"), a filesystem ("fs-xfs"), a
// device-mapper target ("dm-crypt"). Index.Resolve reads such a name the
// way modprobe does (a module's own name first, then every alias pattern
// that matches it, '-' and '_' alike), and Loader.Request loads what it
// resolves to; cmd/init serves the kernel's requests with them.
//
// # Why an index of patterns?
//
// A distribution kernel ships tens of thousands of alias patterns and a
// machine has hundreds of devices. Trying every pattern on every device is
// millions of glob matches, which takes seconds on an emulated machine at
// boot. Almost all patterns begin with a literal prefix ("pci:v00008086d",
// "acpi", "virtio:d00000001v"), so AliasIndex files each pattern under its
// prefix and, for a modalias, only tries the patterns filed under one of
// its own prefixes.
//
// # Hotplug
//
// Devices that appear after the coldplug (a USB stick, a disk added to a
// running virtual machine) are Hotplug's: it keeps reading the uevents of
// the coldplug's Devices, and serves each modalias that the coldplug had
// not, with the loads of Coldplug but one round at a time. Between rounds
// it waits on the socket in Go's poller (Devices.Wait), not on a timer.
//
// # What it does not do
//
// Soft dependencies (modules.softdep) and module parameters are not
// supported. Devices removed are not followed: their modules stay loaded.
// A failed module load is reported to the Logger and to the caller, never
// fatal: the machine may well boot without that device.
package kmod
