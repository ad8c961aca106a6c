package cluster

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"

	"cairn.dev/cairn/node/clusterconfig"
	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/node/marker"
	"cairn.dev/cairn/node/roleserve"
	"cairn.dev/cairn/pkg/supervisor"
	api "cairn.dev/cairn/proto/api"
	private "cairn.dev/cairn/proto/private"
)

// bootstrap makes this node the first of a new cluster. It prepares the
// keys and the data partition and hands the role server a Membership with
// the new cluster's bootstrap data: the role server starts etcd, writes
// the cluster's state and makes the node's identity, which Run then stores
// and seals. Until the sealed configuration exists, a reboot starts the
// bootstrap over on a new data partition, as nothing of the cluster can
// have been used yet.
func (s *Service) bootstrap(ctx context.Context, p *api.NodeParameters_ClusterBootstrap) (*roleserve.Membership, error) {
	log := supervisor.Logger(ctx)
	marker.Log(log, marker.Bootstrapping)
	conf := clusterconfig.Resolve(p.GetInitialClusterConfiguration())
	if conf.GetSecureBootRequired() && !s.cfg.SecureBoot {
		log.Errorf("Cannot bootstrap: the cluster's configuration requires Secure Boot, and the firmware did not boot this node under it")
		return nil, errors.New("the cluster requires Secure Boot, which is off")
	}
	plan, err := planSealing(conf, s.openTPM)
	if err != nil {
		log.Errorf("Cannot bootstrap: %v", err)
		return nil, fmt.Errorf("when checking the TPM: %w", err)
	}
	addr, err := s.waitAddress(ctx)
	if err != nil {
		return nil, err
	}
	keys, err := s.newKeys(!insecurePolicy(conf))
	if err != nil {
		return nil, err
	}
	pub := keys.node.Public().(ed25519.PublicKey)
	sc := &private.SealedConfiguration{
		NodeUnlockKey:    keys.nodeUnlockKey,
		JoinKey:          keys.join.Seed(),
		StorageSecurity:  storageSecurity(conf),
		ClusterUnlockKey: keys.clusterUnlockKey,
		NodeId:           identity.NodeID(pub),
	}
	if sc.StorageSecurity == private.StorageSecurity_STORAGE_SECURITY_INSECURE {
		sc.NodeUnlockKey = nil
		log.Warningf("The cluster's storage security policy is INSECURE: the data partition is not encrypted")
	}
	if !s.mounted {
		if err := s.mountNew(ctx, log, sc); err != nil {
			return nil, fmt.Errorf("when creating the data partition: %w", err)
		}
		s.mounted = true
	}
	s.unsealed = &unsealedEnrolment{sc: sc, plan: plan, done: marker.Bootstrapped}
	return &roleserve.Membership{
		NodeKey: keys.node,
		Bootstrap: &roleserve.Bootstrap{
			OwnerPublicKey:   ed25519.PublicKey(p.GetOwnerPublicKey()),
			Configuration:    conf,
			JoinPublicKey:    keys.join.Public().(ed25519.PublicKey),
			ClusterUnlockKey: keys.clusterUnlockKey,
			ExternalAddress:  addr,
			SealsWithTPM:     plan.useTPM,
		},
		InitialRoles: &api.NodeRoles{ConsensusMember: &api.NodeRoles_ConsensusMember{}},
		ClusterDirectory: &api.ClusterDirectory{Nodes: []*api.ClusterDirectory_Node{{
			Id:        sc.NodeId,
			PublicKey: pub,
			Addresses: []*api.ClusterDirectory_Node_Address{{Host: addr.String()}},
		}}},
	}, nil
}

// insecurePolicy says whether the cluster stores data unencrypted.
func insecurePolicy(c *api.ClusterConfiguration) bool {
	return c.GetStorageSecurityPolicy() == api.StorageSecurityPolicy_STORAGE_SECURITY_POLICY_INSECURE
}

// storageSecurity is how a node of a cluster with configuration c sets
// up its data partition.
func storageSecurity(c *api.ClusterConfiguration) private.StorageSecurity {
	if insecurePolicy(c) {
		return private.StorageSecurity_STORAGE_SECURITY_INSECURE
	}
	return private.StorageSecurity_STORAGE_SECURITY_ENCRYPTED
}

// cloneSealed copies a sealed configuration, so that the copy can be
// completed without touching the original.
func cloneSealed(sc *private.SealedConfiguration) *private.SealedConfiguration {
	return &private.SealedConfiguration{
		NodeUnlockKey:        bytes.Clone(sc.GetNodeUnlockKey()),
		JoinKey:              bytes.Clone(sc.GetJoinKey()),
		ClusterCaCertificate: bytes.Clone(sc.GetClusterCaCertificate()),
		StorageSecurity:      sc.GetStorageSecurity(),
		ClusterUnlockKey:     bytes.Clone(sc.GetClusterUnlockKey()),
		NodeId:               sc.GetNodeId(),
	}
}
