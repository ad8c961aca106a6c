// Package gpt reads and writes GUID partition tables on block devices and
// image files, so that a node can add its data partition on first boot and
// keep the table valid when its image was written to a larger disk.
//
// A GPT is kept twice: the primary header at LBA 1 with its entry array
// after it, and a backup whose header is the disk's last LBA with its
// entry array just before it. Each header carries a CRC32 of itself and of
// its entry array.
//
//	LBA 0   1        2..33          ...          last-32..last-1  last
//	├ MBR ┼ header ┼ entries ┼─ partitions ─┼─ backup entries ─┼ backup header
//	 (0xEE)  primary                               backup
//
// # Why not go-diskfs
//
// go-diskfs writes a whole table in one order of its choosing. Surviving a
// power cut needs a write order this package controls and a reader that
// tells a half-written table from a good one; both are short enough to own.
//
// # Crash safety
//
// Write puts a new table on disk in three durable steps, each ended by a
// sync of the device:
//
//  1. the backup: entry array, then header, at the disk's current end;
//  2. the primary: entry array, then header, at LBA 1;
//  3. cleanup: the protective MBR's size, and the old backup header, when
//     the table moved from the end of a smaller image, is zeroed.
//
// A sector write either lands or not, or leaves a sector whose CRC fails.
// Read trusts the primary whenever it is valid, and only when it is not
// looks for the backup at the disk's last LBA. So after a power cut:
//
//   - during step 1, the primary is the old, valid table: the next boot
//     reads it and, the change still missing, makes it again from scratch;
//   - during step 2, the primary's entries no longer match its header (or
//     its header is torn): it is invalid, and the backup at the disk's
//     end, complete since step 1, holds the new table; the next boot
//     reads it and Write restores the primary from it;
//   - during step 3, both tables are new and valid; the MBR's size field
//     is read by no GPT reader that matters (Linux only notes a mismatch),
//     and a stale old backup header lies inside the new, still unused
//     partition, which the partition's first user overwrites.
//
// In no state is a partition that existed before lost, and a partition
// being added is not in use before Write returned. What this cannot
// cover: a primary destroyed by something else on a disk that also grew
// since, whose only backup still sits at the old image's end.
package gpt
