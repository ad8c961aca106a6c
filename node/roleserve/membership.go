package roleserve

import (
	"crypto/ed25519"
	"net/netip"

	"cairn.dev/cairn/node/identity"
	api "cairn.dev/cairn/proto/api"
)

// Membership is what enrolment (node/cluster) hands the role server once
// the node belongs to a cluster and its data partition is mounted: plain
// data, no code. It is set once per boot on Config.Membership and never
// changes after.
type Membership struct {
	// NodeKey is the node's ed25519 identity key. The node's etcd member
	// gets its peer certificate for the public half.
	NodeKey ed25519.PrivateKey
	// Credentials are the node's identity: its key, the node certificate
	// and the cluster CA certificate. Nil only when Bootstrap is set: then
	// the controlplane makes them and publishes them on Credentials.
	Credentials *identity.Node
	// Bootstrap is set on the one boot that creates the cluster: the
	// controlplane starts etcd on the empty data directory (a new
	// single-member cluster), writes the cluster's initial state from it,
	// issues the node certificate and starts the curator.
	Bootstrap *Bootstrap
	// InitialRoles are the roles the node runs before it has heard from
	// a curator, when the data partition holds no copy of its roles yet
	// (bootstrap: ConsensusMember; a newly committed node: none). Nil
	// means none.
	InitialRoles *api.NodeRoles
	// ClusterDirectory lists the curators the node dials first. The role
	// server stores it on the ESP and keeps it current.
	ClusterDirectory *api.ClusterDirectory
}

// Bootstrap is what the first node of a new cluster knows of it, for the
// controlplane to write into the new etcd.
type Bootstrap struct {
	// OwnerPublicKey is the key whose holder may take ownership.
	OwnerPublicKey ed25519.PublicKey
	// Configuration is the cluster configuration, every field resolved.
	Configuration *api.ClusterConfiguration
	// JoinPublicKey is the public half of the node's join key.
	JoinPublicKey ed25519.PublicKey
	// ClusterUnlockKey is the cluster's half of the node's data partition
	// key; nil when the cluster stores data unencrypted.
	ClusterUnlockKey []byte
	// ExternalAddress is the node's address, for its first status.
	ExternalAddress netip.Addr
	// SealsWithTPM says that the node seals its configuration with its
	// TPM; the curator refuses a later join that says otherwise.
	SealsWithTPM bool
}
