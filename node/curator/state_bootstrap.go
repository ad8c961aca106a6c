package curator

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	"cairn.dev/cairn/node/clusterconfig"
	"cairn.dev/cairn/node/consensus"
	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/node/localstorage"
	"cairn.dev/cairn/proto/api"
	"cairn.dev/cairn/proto/private"
)

// BootstrapState is the initial state of a new cluster, which the node that
// creates it hands to Bootstrap.
type BootstrapState struct {
	// OwnerPublicKey is the owner's ed25519 public key, from the bootstrap
	// parameters. AAA.Escrow issues the owner certificate for it.
	OwnerPublicKey ed25519.PublicKey
	// Configuration is the cluster's policy, resolved: no field may be
	// UNSPECIFIED.
	Configuration *api.ClusterConfiguration
	// NodePublicKey is the bootstrapping node's identity key.
	NodePublicKey ed25519.PublicKey
	// JoinPublicKey is the public half of the bootstrapping node's join
	// key, checked by JoinNode after each reboot.
	JoinPublicKey ed25519.PublicKey
	// ClusterUnlockKey is the cluster's half of the bootstrapping node's
	// data partition key: localstorage.KeySize bytes, or empty when the
	// storage security policy is insecure.
	ClusterUnlockKey []byte
	// Status is what the node reports about itself; may be nil.
	Status *api.NodeStatus
	// SealsWithTPM says that the node seals its configuration with its
	// TPM (JoinNode checks it).
	SealsWithTPM bool
}

// validate checks that b describes a cluster the curator can serve.
func (b *BootstrapState) validate() error {
	for _, k := range []struct {
		name string
		key  ed25519.PublicKey
	}{{"owner", b.OwnerPublicKey}, {"node", b.NodePublicKey}, {"join", b.JoinPublicKey}} {
		if len(k.key) != ed25519.PublicKeySize {
			return fmt.Errorf("%s public key is %d bytes, want %d", k.name, len(k.key), ed25519.PublicKeySize)
		}
	}
	c := b.Configuration
	if c == nil {
		return errors.New("no cluster configuration")
	}
	if c.StorageSecurityPolicy == api.StorageSecurityPolicy_STORAGE_SECURITY_POLICY_UNSPECIFIED || c.TpmMode == api.TPMMode_TPM_MODE_UNSPECIFIED {
		return errors.New("cluster configuration is not resolved (has UNSPECIFIED fields)")
	}
	if err := clusterconfig.Validate(c); err != nil {
		return fmt.Errorf("cluster configuration: %w", err)
	}
	want := localstorage.KeySize
	if insecure(c) {
		want = 0
	}
	if len(b.ClusterUnlockKey) != want {
		return fmt.Errorf("cluster unlock key is %d bytes, want %d for storage security %s", len(b.ClusterUnlockKey), want, c.StorageSecurityPolicy)
	}
	return nil
}

// Bootstrap writes the initial state of a new cluster into etcd: the owner
// key, the cluster configuration, a fresh register ticket, and the
// bootstrapping node, UP with the ConsensusMember role. etcd is a client
// for the whole key space. Calling it again with the same owner key does
// nothing (the first ticket and node record stay); a cluster of another
// owner is an error.
func Bootstrap(ctx context.Context, etcd *consensus.Client, b BootstrapState) error {
	if err := b.validate(); err != nil {
		return fmt.Errorf("when checking the bootstrap state: %w", err)
	}
	cl, err := curatorClient(etcd)
	if err != nil {
		return err
	}
	defer cl.Close()

	ticket, err := newTicket()
	if err != nil {
		return err
	}
	config, err := proto.Marshal(b.Configuration)
	if err != nil {
		return fmt.Errorf("when marshalling the cluster configuration: %w", err)
	}
	node, err := proto.Marshal(&private.Node{
		PublicKey:        b.NodePublicKey,
		JoinKey:          b.JoinPublicKey,
		ClusterUnlockKey: b.ClusterUnlockKey,
		FsmState:         api.NodeState_NODE_STATE_UP,
		Roles:            &api.NodeRoles{ConsensusMember: &api.NodeRoles_ConsensusMember{}},
		Status:           b.Status,
		SealsWithTpm:     b.SealsWithTPM,
	})
	if err != nil {
		return fmt.Errorf("when marshalling the node record: %w", err)
	}
	id := identity.NodeID(b.NodePublicKey)
	resp, err := cl.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(ownerKey), "=", 0)).
		Then(
			clientv3.OpPut(ownerKey, string(b.OwnerPublicKey)),
			clientv3.OpPut(configurationKey, string(config)),
			clientv3.OpPut(ticketKey, string(ticket)),
			clientv3.OpPut(nodeKey(id), string(node)),
		).
		Else(clientv3.OpGet(ownerKey)).
		Commit()
	if err != nil {
		return fmt.Errorf("when writing the initial cluster state: %w", err)
	}
	if resp.Succeeded {
		return nil
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) != 1 || !bytes.Equal(kvs[0].Value, b.OwnerPublicKey) {
		return errors.New("etcd already holds a cluster of another owner")
	}
	// Bootstrapped before. The node record went in with the owner key, so
	// it is there unless someone deleted it; put it back then.
	if _, err := cl.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(nodeKey(id)), "=", 0)).
		Then(clientv3.OpPut(nodeKey(id), string(node))).
		Commit(); err != nil {
		return fmt.Errorf("when restoring the bootstrap node record: %w", err)
	}
	return nil
}
