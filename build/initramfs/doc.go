// Package initramfs builds Cairn's initial root filesystem: the archive the
// kernel unpacks into memory before it runs /init. Cairn boots from it and
// nothing else, so it holds all a node needs before its disks are up:
//
//	/init                       the static node binary (cmd/init)
//	/lib/modules/<release>/     the carried kernel modules and their indexes
//	/usr/sbin/mkfs.xfs, ...     HostBinaries from Debian, at their own paths
//	/lib/x86_64-linux-gnu/, ... their libraries and the loader (elfdeps)
//	/dev/console, null, ttyS0   device nodes the kernel and /init open first
//	/proc /sys /run /tmp /etc   mount points and scratch directories
//
// The archive is cpio "newc" (Writer), compressed with zstd, which the
// Debian kernel unpacks natively (CONFIG_RD_ZSTD). Entries are sorted and
// carry fixed times and owners, so the same inputs give a byte-identical
// initramfs.
package initramfs
