package modules

import "slices"

// A Prefix selects every module whose path below the module directory's
// kernel/ folder starts with Path. Why says what the modules are for.
type Prefix struct {
	// Path is a prefix of module paths relative to kernel/, like
	// "drivers/virtio/" (a folder) or "fs/xfs/xfs.ko" (one module).
	Path string
	// Why is the reason Cairn carries these modules, for people.
	Why string
}

// Carried is the set of modules Cairn carries, before their dependencies
// are added: the system partition holds all of them, and a node loads
// them once that partition is verified and mounted. Every entry must match
// at least one module of the kernel, so a module Debian renames or drops
// fails the build instead of vanishing silently.
var Carried = []Prefix{
	// Virtual machines: qemu's virtio devices and its firmware config.
	{"drivers/virtio/", "virtio bus: pci, mmio, balloon, input"},
	{"drivers/block/virtio_blk.ko", "virtio disks"},
	{"drivers/scsi/virtio_scsi.ko", "virtio-scsi disks"},
	{"drivers/net/virtio_net.ko", "virtio network"},
	{"drivers/char/hw_random/virtio-rng.ko", "virtio entropy source"},
	{"drivers/char/virtio_console.ko", "virtio serial console"},
	{"drivers/firmware/qemu_fw_cfg.ko", "node parameters from qemu fw_cfg"},

	// Disks of real machines.
	{"drivers/nvme/host/nvme.ko", "NVMe disks"},
	{"drivers/ata/ahci.ko", "SATA disks (AHCI)"},
	{"drivers/ata/ata_piix.ko", "older Intel SATA/PATA controllers"},
	{"drivers/ata/ata_generic.ko", "generic ATA controllers"},
	{"drivers/scsi/sd_mod.ko", "SCSI disk class, used by SATA and virtio-scsi"},
	{"drivers/block/loop.ko", "loop devices for containers and images"},

	// USB sticks, for a parameters disk plugged into a node that waits for
	// one: the host controllers (xHCI, and the EHCI, OHCI and UHCI of
	// older machines) and USB mass storage. Loaded only on a machine that
	// has the controller, and usb-storage only once a stick is plugged in.
	{"drivers/usb/host/xhci-pci.ko", "USB 3 host controllers"},
	{"drivers/usb/host/ehci-pci.ko", "USB 2 host controllers"},
	{"drivers/usb/host/ohci-pci.ko", "USB 1.1 host controllers (OHCI)"},
	{"drivers/usb/host/uhci-hcd.ko", "USB 1.1 host controllers (UHCI)"},
	{"drivers/usb/storage/usb-storage.ko", "USB sticks (bulk-only transport)"},
	{"drivers/usb/storage/uas.ko", "USB disks (USB Attached SCSI)"},

	// Common network cards.
	{"drivers/net/ethernet/intel/e1000/", "Intel PRO/1000 (qemu's default e1000)"},
	{"drivers/net/ethernet/intel/e1000e/", "Intel PCIe gigabit"},
	{"drivers/net/ethernet/intel/igb/", "Intel server gigabit"},
	{"drivers/net/ethernet/intel/ixgbe/", "Intel 10 gigabit"},
	{"drivers/net/ethernet/realtek/r8169.ko", "Realtek gigabit"},
	{"drivers/net/ethernet/broadcom/bnxt/", "Broadcom NetXtreme-C/E"},
	{"drivers/net/ethernet/broadcom/tg3.ko", "Broadcom Tigon3"},

	// Storage stack: the encrypted data partition and its filesystems.
	{"drivers/md/dm-mod.ko", "device mapper"},
	{"drivers/md/dm-crypt.ko", "encrypted data partition"},
	{"drivers/md/dm-verity.ko", "verified system partition (build/system)"},
	{"crypto/", "ciphers, modes, checksums the kernel requests by name (crypto-xts, ...)"},
	// Without AES-NI (qemu64, older CPUs) the kernel builds dm-crypt's
	// xts(aes) from xts over ecb(aes) over the generic AES; aes_generic
	// and cbc are built into Debian's kernel, so only these two are
	// modules. Named on their own so that losing them fails the build.
	{"crypto/xts.ko", "XTS mode of the data partition's aes-xts-plain64"},
	{"crypto/ecb.ko", "ecb(aes) under xts(aes) on CPUs without AES-NI"},
	{"arch/x86/crypto/", "accelerated AES, SHA and CRC"},
	// The checksums the system partition needs before it is mounted:
	// dm-verity's sha256 and EROFS's crc32c, with their accelerated
	// versions. Named on their own so that the initramfs can carry them
	// without the rest of crypto/.
	{"crypto/crc32c_generic.ko", "crc32c of EROFS (libcrc32c), before the system partition"},
	{"arch/x86/crypto/sha256-ssse3.ko", "accelerated sha256 of dm-verity, before the system partition"},
	{"arch/x86/crypto/crc32c-intel.ko", "accelerated crc32c, before the system partition"},
	{"fs/xfs/", "data partition filesystem"},
	{"fs/erofs/", "system partition filesystem (read-only, verified)"},
	{"fs/ext4/", "ext4 filesystems"},
	{"fs/fat/", "EFI system partition (vfat)"},
	{"fs/nls/nls_cp437.ko", "vfat default codepage"},
	{"fs/nls/nls_iso8859-1.ko", "vfat default iocharset"},
	{"fs/nls/nls_utf8.ko", "vfat utf8 names"},
	{"fs/nls/nls_ascii.ko", "vfat default iocharset of Debian's kernel (ascii)"},
	{"fs/efivarfs/", "EFI variables"},

	// Platform.
	{"drivers/char/tpm/", "TPM 2.0 (tpm_tis, tpm_crb) for sealing"},
	{"drivers/acpi/button.ko", "ACPI power button: clean shutdown from the host"},
	{"drivers/watchdog/i6300esb.ko", "qemu's watchdog, fed by PID 1: a hung trial boot is reset"},
	{"drivers/watchdog/iTCO_wdt.ko", "Intel chipsets' watchdog, fed by PID 1"},

	// Kubernetes networking and container storage.
	{"fs/overlayfs/", "container image layers"},
	{"net/bridge/", "bridge, br_netfilter, ebtables"},
	{"drivers/net/veth.ko", "pod network pairs"},
	{"drivers/net/wireguard/", "the pod tunnel between workers"},
	{"drivers/net/vxlan/", "overlay networks"},
	{"drivers/net/dummy.ko", "kube-proxy ipvs address holder"},
	{"net/ipv4/ipip.ko", "IP-in-IP overlay networks"},
	{"net/sctp/", "SCTP for pods and Services"},
	{"net/netfilter/", "nf_tables, conntrack, xtables, ipvs"},
	{"net/ipv4/netfilter/", "iptables and IPv4 NAT"},
	{"net/ipv6/netfilter/", "ip6tables and IPv6 NAT"},
	{"net/sched/", "traffic control for CNI plugins"},
}

// Early returns the part of Carried that the initramfs carries: what a
// boot needs before its system partition is mounted. That is the disk the
// node is on (virtio, NVMe, SATA), device-mapper's verity target, EROFS
// and their checksums for the system partition, vfat for the ESP,
// efivarfs, the power button, and qemu's virtio devices with their network
// card. Everything else waits on the system partition, whose module
// directory the node binds over the initramfs's as soon as it is mounted:
// the data partition's dm-crypt, ciphers and XFS, the TPM's less common
// drivers, network cards of real machines, Kubernetes' networking. Under
// software emulation every megabyte the initramfs holds costs boot time
// (the kernel unpacks it into memory before /init starts, some 20 ms per
// megabyte, and kexec hashes it twice), while a module read from the
// system partition costs only its verification by dm-verity, and only
// when it is loaded.
func Early() []Prefix {
	var early []Prefix
	for _, p := range Carried {
		if slices.Contains(earlyPaths, p.Path) {
			early = append(early, p)
		}
	}
	return early
}

// earlyPaths name the entries of Carried that Early returns.
var earlyPaths = []string{
	// The disks and qemu's devices.
	"drivers/virtio/", "drivers/block/virtio_blk.ko", "drivers/scsi/virtio_scsi.ko",
	"drivers/net/virtio_net.ko", "drivers/char/hw_random/virtio-rng.ko", "drivers/char/virtio_console.ko",
	"drivers/firmware/qemu_fw_cfg.ko",
	"drivers/nvme/host/nvme.ko", "drivers/ata/ahci.ko", "drivers/ata/ata_piix.ko", "drivers/ata/ata_generic.ko",
	"drivers/scsi/sd_mod.ko",
	// The system partition and the ESP.
	"drivers/md/dm-mod.ko", "drivers/md/dm-verity.ko", "fs/erofs/",
	"crypto/crc32c_generic.ko", "arch/x86/crypto/sha256-ssse3.ko", "arch/x86/crypto/crc32c-intel.ko",
	"fs/fat/", "fs/nls/nls_cp437.ko", "fs/nls/nls_iso8859-1.ko", "fs/nls/nls_utf8.ko", "fs/nls/nls_ascii.ko",
	"fs/efivarfs/",
	// The platform.
	"drivers/acpi/button.ko",
}
