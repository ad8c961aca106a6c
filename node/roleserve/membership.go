package roleserve

import (
	"context"
	"crypto/ed25519"

	"cairn.dev/cairn/node/consensus"
	"cairn.dev/cairn/node/identity"
	api "cairn.dev/cairn/proto/api"
)

// Membership is what enrolment (node/cluster) hands the role server once
// the node belongs to a cluster and its data partition is mounted. It is
// set once per boot on Config.Membership and never changes after.
type Membership struct {
	// NodeKey is the node's ed25519 identity key. The node's etcd member
	// gets its peer certificate for the public half.
	NodeKey ed25519.PrivateKey
	// Credentials are the node's identity: its key, the node certificate
	// and the cluster CA certificate. Nil only when Bootstrap is set: then
	// Bootstrap returns them.
	Credentials *identity.Node
	// Bootstrap is set on the one boot that creates the cluster. The
	// controlplane worker starts etcd on the empty data directory (a new
	// single-member cluster with its CA) and calls Bootstrap once etcd
	// runs, with a client for etcd's whole key space, before it starts the
	// curator. Bootstrap writes the cluster's initial state, issues the
	// node certificate and returns the node's credentials. It must be
	// idempotent: after an error it is called again on the same etcd.
	Bootstrap func(ctx context.Context, etcd *consensus.Client) (*identity.Node, error)
	// InitialRoles are the roles the node runs before it has heard from
	// a curator, when the data partition holds no copy of its roles yet
	// (bootstrap: ConsensusMember; a newly committed node: none). Nil
	// means none.
	InitialRoles *api.NodeRoles
	// ClusterDirectory lists the curators the node dials first.
	ClusterDirectory *api.ClusterDirectory
}
