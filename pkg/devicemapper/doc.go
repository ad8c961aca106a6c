// Package devicemapper drives the kernel's device-mapper through ioctls on
// /dev/mapper/control, with no dmsetup, cryptsetup or libdevmapper. Cairn
// uses it early in boot, from a static binary, to open its encrypted data
// partition (a dm-crypt target) and its verified, read-only system
// partition (a dm-verity target).
//
// # Why ioctls, not dmsetup
//
// The node carries no userland beyond its own binary; the ioctl interface
// is small, stable (version 4 since Linux 2.6) and documented in the
// kernel's UAPI header linux/dm-ioctl.h. Every command exchanges one
// buffer: a fixed 312-byte struct dm_ioctl, then a variable payload
// starting at its data_start field.
//
//	  request buffer (DM_TABLE_LOAD)              reply buffer (DM_TABLE_STATUS)
//	┌─────────────────────────────┐            ┌─────────────────────────────┐
//	│ dm_ioctl (312 bytes)        │            │ dm_ioctl: flags, dev, count │
//	│  version, data_size,        │  ioctl(2)  │  data_start ──┐             │
//	│  data_start=312, name, ...  │ ─────────▶ ├───────────────▼─────────────┤
//	├─────────────────────────────┤            │ dm_target_spec + params\0   │
//	│ dm_target_spec (40 bytes)   │            │  next: offset from the first│
//	│ params "aes-xts-plain64 …"\0│            │  spec (not from this one)   │
//	│ padding to 8                │            │ dm_target_spec + params\0   │
//	└─────────────────────────────┘            └─────────────────────────────┘
//
// The marshalling (encode.go) is independent of the running kernel and is
// tested byte for byte; the ioctl calls (control_linux.go) need a kernel
// with device-mapper and are exercised by Cairn's qemu tests.
//
// # Lifecycle of a mapped device
//
//	Create(name) ─▶ LoadTable(name, targets) ─▶ Resume(name) ─▶ in use
//	                                                              │
//	                                          Remove(name) ◀──────┘
//
// A created device has no table and serves no I/O; a loaded table is
// "inactive" until Resume swaps it in. CreateCrypt and CreateVerity do all
// three steps for a dm-crypt or a dm-verity target, removing the half-made
// device when a step fails. A verity table is loaded read-only, as the
// kernel demands; its status (VerityState) says whether a block read so
// far failed its check.
//
// Key material passes only through the table parameters of LoadTable; it is
// sent with the kernel's secure-data flag (the kernel wipes its copies) and
// this package never logs or formats a table into an error.
package devicemapper
