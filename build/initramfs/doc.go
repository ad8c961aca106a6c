// Package initramfs builds Cairn's initial root filesystem: the archive the
// kernel unpacks into memory before it runs /init. It stays in memory for
// the node's whole life, so it holds only what a node needs to find,
// verify and mount its system partition (build/system) and to report on
// the console; everything else lives on the system partition:
//
//	/init                       the static node binary (cmd/init)
//	/lib/modules/<release>/     the carried kernel modules and their indexes
//	/lib64, /lib/x86_64-linux-gnu
//	                            links into /system, where the system
//	                            image's loader and libraries are
//	                            (build/system.LoaderLinks)
//	/dev/console, null, ttyS0   device nodes the kernel and /init open first
//	/proc /sys /run /tmp /etc   mount points and scratch directories
//
// The archive is cpio "newc" (Writer), compressed with LZ4 in the legacy
// frame format, which the Debian kernel unpacks natively (CONFIG_RD_LZ4)
// and faster than any other format it reads. Entries are sorted and
// carry fixed times and owners, so the same inputs give a byte-identical
// initramfs.
package initramfs
