// Package localstorage owns a node's disks: it finds the boot disk, mounts
// its EFI system partition and its verified system partition, and creates,
// encrypts, formats and mounts the data partition, all reached through one
// declarative tree (Root).
//
//	boot disk (GPT)                                        mount points
//	┌─────┬────────────┬──────────────┬──────────┬────────────────────┐
//	│ GPT │ ESP (vfat) │ system-a     │ system-b │ data partition     │
//	│     │ cairn/*.pb─┼──────────────┼──────────┼────────────────────┼─▶ /esp
//	│     │            │ EROFS ‖ tree │ (A/B)    │                    │
//	│     │            │  dm-verity ──┼──────────┼─ read-only EROFS ──┼─▶ /system
//	│     │            │              │          │ header │ dm-crypt ─┼─▶ XFS /data
//	└─────┴────────────┴──────────────┴──────────┴────────────────────┘
//	                                     tmpfs ─────────────────────────▶ /ephemeral
//
// MountMatchingSystem finds the system slot by content: the one whose
// hash tree's top hashes to the root hash of the command line, slot a
// first, so that one signed kernel image boots from either slot. It maps
// that slot through dm-verity and mounts it at Root.System; it comes
// first, as mkfs.xfs lives there. A slot of another image, or of none,
// costs one block read and is passed over (ErrSlotMismatch); one whose
// top matches but whose first blocks, which every mount reads, do not is
// ErrSystemCorrupt; either is never mounted. MountSystem mounts a slot
// named (cairn.system=, for tests), any mismatch being ErrSystemCorrupt.
// BootedSystem says which slot runs, Slot.Other where an update goes, and
// SystemPartition where that slot's partition is.
//
// The enrolment code decides which of MountNew and MountExisting to call:
// MountNew when the node has no sealed configuration yet (nothing stored
// can be lost), MountExisting on every later boot. MountNew creates the
// partition in the largest free span after the ESP, which is after the
// system slots (growing the GPT to a disk larger than the image), keys dm-crypt with node key XOR cluster
// key, runs mkfs.xfs and writes a small plaintext header. MountExisting
// never formats: a header whose key check fails, or a volume that opens
// to no XFS superblock, is reported as a wrong key.
//
// # The data partition header
//
// The first MiB of the partition is plaintext; its first sector holds
// "CAIRNDAT", a version, the security mode and an HMAC-SHA256 of a fixed
// label under the data key (which tells a wrong key apart without
// decrypting anything, and says nothing about the key). The dm-crypt
// volume starts at 1 MiB. An insecure partition, allowed only through the
// explicit *Insecure calls, is a bare XFS filesystem from sector 0.
//
// # Power cuts during MountNew
//
// The GPT is written crash-safely (package gpt). Then MountNew zeroes the
// header, makes the filesystem, and writes the header last: a partition
// with a header is complete. A cut before that leaves no header, and the
// next MountNew starts over; MountExisting is never reached before
// enrolment has stored its sealed configuration, which it does only after
// MountNew returned. A MountNew after a cut that came once the header was
// written finds it, with the same keys when enrolment kept them (a
// registering node does, node/cluster), and mounts the filesystem as it
// is. An insecure partition has no header: its XFS superblock is the mark,
// and one whose sb_inprogress flag is still set (mkfs.xfs clears it with
// its last write) counts as blank, so a cut during mkfs.xfs is redone
// rather than mounted, and MountExistingInsecure refuses it.
//
//	MountNew                                test point (node/testpoint)
//	  GPT entry written, known to the kernel  ◀ gpt-written
//	  header zeroed, dm-crypt target set up   ◀ crypt-opened
//	  mkfs.xfs started                        ◀ mkfs-running (left running)
//	  mkfs.xfs finished                       ◀ mkfs-done
//	  header written: the partition is complete
//	  mounted at Root.Data
//
// The end-to-end suite TestPowerCut (test/e2e) stops a test image at each
// of these points and cuts its power.
package localstorage
