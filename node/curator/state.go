package curator

import (
	"context"
	"errors"
	"fmt"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"cairn.dev/cairn/node/consensus"
)

// The curator's keys, inside its etcd namespace (consensus Client.Sub).
const (
	// namespace is the curator's part of etcd's key space.
	namespace = "curator"
	// nodePrefix holds one private.Node per node, keyed by node ID.
	nodePrefix = "nodes/"
	// waitingPrefix holds an empty key per node in state NEW, keyed by
	// node ID, written and deleted with the node's record: RegisterNode
	// counts the nodes waiting for approval from it without reading every
	// node, and its transaction conflicts only with other registrations.
	waitingPrefix = "waiting/"
	// ownerKey holds the bootstrap owner's ed25519 public key, raw; the
	// current owner key is in the owner trust (state_owner.go).
	ownerKey = "owner/public_key"
	// ticketKey holds the register ticket, raw.
	ticketKey = "register_ticket"
	// configurationKey holds the api.ClusterConfiguration.
	configurationKey = "configuration"
)

func nodeKey(id string) string { return nodePrefix + id }

func waitingKey(id string) string { return waitingPrefix + id }

// curatorClient returns a client confined to the curator's namespace. The
// caller closes it.
func curatorClient(etcd *consensus.Client) (*consensus.Client, error) {
	cl, err := etcd.Sub(namespace)
	if err != nil {
		return nil, fmt.Errorf("when opening the curator namespace: %w", err)
	}
	return cl, nil
}

// nodeIDFromKey returns the node ID in an etcd key under nodePrefix.
func nodeIDFromKey(key []byte) string {
	return strings.TrimPrefix(string(key), nodePrefix)
}

// errUnchanged, returned by the function given to updateNode, leaves the
// record as it is and makes updateNode succeed.
var errUnchanged = errors.New("unchanged")

// putAt stores value under key if the key is still the one of mod
// revision rev (0: none), and says whether it was; what names the value
// in errors.
func (c *curator) putAt(ctx context.Context, key string, value []byte, rev int64, what string) (bool, error) {
	resp, err := c.etcd.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).
		Then(clientv3.OpPut(key, string(value))).
		Commit()
	if err != nil {
		return false, fmt.Errorf("when storing %s: %w", what, err)
	}
	return resp.Succeeded, nil
}
