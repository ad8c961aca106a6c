// Package efivar reads and writes UEFI variables through Linux's efivarfs,
// and encodes the variables the firmware's boot manager reads: the load
// options of Boot#### and the device paths inside them, BootOrder and
// BootNext. A node uses it to boot a staged system slot once through the
// firmware (BootNext), and to make that slot the default once it is
// healthy (BootOrder).
//
//	efivarfs (/sys/firmware/efi/efivars)
//	  BootOrder-<global GUID>   attributes | uint16 numbers, first tried first
//	  BootNext-<global GUID>    attributes | uint16, tried once, then deleted
//	  Boot0003-<global GUID>    attributes | EFI_LOAD_OPTION
//	                                           │
//	  LoadOption{Attributes, Description, FilePath, OptionalData}
//	                                           │
//	  DevicePath: HD(3,GPT,<partition GUID>,0x800,0x80000)/\EFI\cairn\system-b.efi/End
//
// Each variable is a file named <Name>-<vendor GUID> whose content is a
// 4-byte little-endian attribute word followed by the variable's data.
// efivarfs takes a variable only whole, in one write(2), and marks the
// files of variables it does not know to be safe to change immutable
// (FS_IMMUTABLE_FL), so Write and Delete clear that flag first.
//
// # Short-form device paths
//
// A load option's device path normally starts at the PCI root and walks
// down to the disk. A path that starts at a Hard Drive node (HD) instead is
// a short form: the firmware (OVMF included) looks for the partition with
// that GPT signature on every disk and expands the path to the disk that
// holds it. A node writes short forms, since the partition's GUID, not the
// disk's place on the bus, is what names its ESP.
//
// # Why not go-efilib or u-root's efivarfs
//
// The load option and the three device path nodes a node writes are a few
// hundred lines; owning them keeps the parsers of firmware data small
// enough to fuzz whole, and keeps a large dependency off /init.
package efivar
