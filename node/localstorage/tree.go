package localstorage

import (
	"cairn.dev/cairn/node/localstorage/declarative"
)

// Root is the node's storage as a tree, placed at "/" on a node. Every
// piece of Cairn that keeps files reaches them through its fields.
type Root struct {
	declarative.Directory
	// ESP is the EFI system partition, mounted vfat.
	ESP ESPDirectory `dir:"esp"`
	// System is the system partition's booted slot: the read-only EROFS
	// image of build/system, verified by dm-verity, holding the host
	// binaries at their own paths (usr/sbin/mkfs.xfs, ...).
	System declarative.Directory `dir:"system"`
	// Data is the (encrypted) data partition, mounted XFS with project
	// quotas.
	Data DataDirectory `dir:"data"`
	// Ephemeral is a tmpfs, emptied at every boot.
	Ephemeral EphemeralDirectory `dir:"ephemeral"`
}

// ESPDirectory is the root of the ESP.
type ESPDirectory struct {
	declarative.Directory
	// Cairn holds Cairn's own files on the ESP (esp.Dir).
	Cairn ESPCairnDirectory `dir:"cairn"`
	// EFI holds what the firmware boots.
	EFI ESPEFIDirectory `dir:"EFI"`
}

// ESPEFIDirectory is EFI/ on the ESP.
type ESPEFIDirectory struct {
	declarative.Directory
	// Cairn holds the unified kernel image of each system slot the
	// installer wrote (node/update), in esp.UKIDir.
	Cairn ESPUKIDirectory `dir:"cairn"`
	// Boot holds the image the firmware boots when no boot entry names
	// one: the image build's, then the default slot's (node/update).
	Boot ESPBootDirectory `dir:"BOOT"`
}

// ESPBootDirectory is EFI/BOOT/ on the ESP, the removable media path.
type ESPBootDirectory struct {
	declarative.Directory
	// BootX64 is the unified kernel image booted by path (build/disk's
	// BootPath, node/kexec's image).
	BootX64 declarative.File `file:"BOOTX64.EFI"`
}

// ESPUKIDirectory is esp.UKIDir: a unified kernel image per system slot,
// named by esp.UKIName.
type ESPUKIDirectory struct {
	declarative.Directory
	SystemA declarative.File `file:"system-a.efi"`
	SystemB declarative.File `file:"system-b.efi"`
}

// For returns the file of slot's unified kernel image.
func (d *ESPUKIDirectory) For(slot Slot) *declarative.File {
	if slot == SlotB {
		return &d.SystemB
	}
	return &d.SystemA
}

// ESPCairnDirectory is cairn/ on the ESP. Its file names are fixed: the
// operator's tools write them onto images. node/esp names them; struct tags
// cannot name its constants, so TestTreePaths checks that these tags agree.
type ESPCairnDirectory struct {
	declarative.Directory
	// Parameters is the node parameters (cairn.api.NodeParameters).
	Parameters declarative.File `file:"parameters.pb"`
	// SealedConfiguration is what the node needs to rejoin its cluster
	// (cairn.private.SealedConfiguration), sealed when a TPM exists.
	SealedConfiguration declarative.File `file:"sealed_configuration.pb"`
	// ClusterDirectory lists the cluster's curators.
	ClusterDirectory declarative.File `file:"cluster_directory.pb"`
	// Refusal says, in words, that and why a curator refused this node
	// when it tried to join: while it exists the node never starts cold
	// (node/cluster's join).
	Refusal declarative.File `file:"refusal.txt"`
	// RegistrationKeys are the keys of a node that registers
	// (cairn.private.RegistrationKeys), sealed when a TPM exists, kept
	// from before RegisterNode until the sealed configuration replaces
	// them, so that a node whose power is cut in between registers again
	// as itself.
	RegistrationKeys declarative.File `file:"registration_keys.pb"`
	// SystemSlots is the installer's record of the system slots
	// (cairn.private.SystemSlots, node/update).
	SystemSlots declarative.File `file:"system_slots.pb"`
}

// DataDirectory is the root of the data partition.
type DataDirectory struct {
	declarative.Directory
	// Node holds the node's own state (identity key and certificates,
	// roles).
	Node NodeDirectory `dir:"node"`
	// Etcd is the data directory of the node's etcd member.
	Etcd declarative.Directory `dir:"etcd"`
	// Kubernetes holds kubelet and containerd state.
	Kubernetes declarative.Directory `dir:"kubernetes"`
	// Volumes holds persistent volumes, each an XFS project.
	Volumes declarative.Directory `dir:"volumes"`
	// Logs keeps the log tree of the last few boots (node/logstore).
	Logs declarative.Directory `dir:"logs"`
	// Update holds a release while the installer downloads and checks it,
	// before it writes anything to a system slot (node/update).
	Update declarative.Directory `dir:"update"`
}

// NodeDirectory is node/ on the data partition: the node's own state.
type NodeDirectory struct {
	declarative.Directory
	// Roles is the role server's copy of the roles the curator last gave
	// the node (cairn.api.NodeRoles), so that it can start what the node
	// runs before any curator answers.
	Roles declarative.File `file:"roles.pb"`
	// Identity is the node's identity bundle (node/identity's MarshalPEM:
	// private key, node certificate, CA certificate), written when the
	// node enrols.
	Identity declarative.File `file:"identity.pem"`
	// OwnerTrust is the role server's copy of the owner trust a curator
	// last sent (cairn.api.OwnerTrust), by which node management judges
	// the owner before any curator answers.
	OwnerTrust declarative.File `file:"owner_trust.pb"`
}

// EphemeralDirectory is the root of the tmpfs.
type EphemeralDirectory struct {
	declarative.Directory
	// Containerd holds containerd's runtime state.
	Containerd declarative.Directory `dir:"containerd"`
}
