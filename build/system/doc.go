// Package system builds Cairn's system image: the read-only filesystem of
// everything a node runs that early boot does not need, and the dm-verity
// hash tree that pins it to one root hash on the unified kernel image's
// command line.
//
//	HostBinaries ─▶ elfdeps ─▶ staging dir ─▶ mkfs.erofs ─▶ EROFS ─┐
//	(mkfs.xfs, …)  (libraries,  (own paths,   (lz4hc, -T0,   image  │
//	                loader)      fixed modes)  --all-root,          │
//	Kubernetes payload ────────▶     ▲         fixed UUID)          │
//	(static programs, links)   (KubernetesBin)                      ▼
//	                                    pkg/verity: salt, hash tree, root hash
//	                                                                │
//	system.img = EROFS image ‖ hash tree ◀──────────────────────────┤
//	cmdline    = build/cmdline + cairn.verity=… ◀───────────────────┘
//
// The image goes into the system-a slot of the disk (build/disk); an
// update writes one into the slot not running. The command line pins the
// image, not a slot: the unified kernel image that carries it is signed
// and never edited, so it must boot from either slot. The node mounts the
// slot whose content matches the root hash (node/localstorage), mapped
// through dm-verity with the parameters of its command line, read-only at
// MountPoint; a block that does not match its hash fails the read, so
// nothing unverified is ever used.
//
// # Why EROFS
//
// A read-only image needs no journal, no free-space accounting and no
// fsck; EROFS (Monogon's choice too) is built for exactly that, reads
// compressed blocks in place, and Debian's kernel has it as a module.
// Debian's erofs-utils makes it at build time; no tool of it runs on the
// node.
//
// # Reproducible
//
// The same inputs give the same bytes: mkfs.erofs gets every timestamp
// set to 0 (-T0), every owner root (--all-root), no extended attributes
// (-x -1) and a fixed filesystem UUID; it orders directory entries by
// name itself. The staging directory's name never reaches the image, and
// the verity salt is derived from the filesystem image, not drawn at
// random.
//
// # Running what the image holds
//
// The Kubernetes payload (build/kubernetes) is static: it lands at
// KubernetesBin below MountPoint as it is, and a program of it that would
// need a loader or a library fails the build instead of the node.
//
// The host binaries keep their own paths below MountPoint, with the
// dynamic loader and libraries at theirs. A binary asks the kernel for its
// loader by an absolute path (/lib64/ld-linux-x86-64.so.2), and the loader
// looks for libraries in absolute default directories; so the initramfs
// carries LoaderLinks, symlinks from those directories into MountPoint,
// which resolve once the system partition is mounted.
package system
