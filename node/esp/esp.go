// Package esp names the files Cairn keeps on the EFI system partition, in
// its directory cairn/. The names are fixed: images, the operator's tools
// (cairnctl writes the node parameters onto an image's ESP) and earlier
// versions of the node read and write them, so each is written here once.
//
// It holds names only, so that both the node and cairnctl, which runs on
// operators' machines, can import it. node/localstorage places the files
// in its declarative tree; struct tags cannot name a constant, so its tags
// repeat these names, and its TestTreePaths checks that they agree.
package esp

// Dir is Cairn's directory at the root of the ESP.
const Dir = "cairn"

// The files in Dir. Each has one writer.
const (
	// Parameters is the node parameters (cairn.api.NodeParameters),
	// written by cairnctl onto an image; node/parameters reads them.
	Parameters = "parameters.pb"
	// SealedConfiguration is what a node needs to rejoin its cluster
	// (cairn.private.SealedConfiguration), written by node/cluster.
	SealedConfiguration = "sealed_configuration.pb"
	// ClusterDirectory lists the cluster's curators
	// (cairn.api.ClusterDirectory), written by node/roleserve.
	ClusterDirectory = "cluster_directory.pb"
	// RegistrationKeys are the keys of a node that registers
	// (cairn.private.RegistrationKeys), written by node/cluster.
	RegistrationKeys = "registration_keys.pb"
	// Refusal says, in words, why a curator refused this node when it
	// tried to join, written by node/cluster.
	Refusal = "refusal.txt"
	// SystemSlots is the record of what was installed in the system
	// slots (cairn.private.SystemSlots), written by node/update.
	SystemSlots = "system_slots.pb"
)

// UKIDir is the directory, from the root of the ESP, of the unified
// kernel images node/update installs, one per system slot, named by
// UKIName.
const UKIDir = "EFI/cairn"

// UKIName is the name in UKIDir of the unified kernel image of the system
// slot named slot ("a", "b").
func UKIName(slot string) string { return "system-" + slot + ".efi" }

// ParametersPath is the path of Parameters from the root of the ESP, as
// tools that write onto an image's ESP name it.
const ParametersPath = Dir + "/" + Parameters
