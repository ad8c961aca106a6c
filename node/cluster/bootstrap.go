package cluster

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"fmt"
	"net/netip"
	"time"

	"cairn.dev/cairn/node/consensus"
	"cairn.dev/cairn/node/curator"
	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/node/roleserve"
	"cairn.dev/cairn/pkg/logtree"
	"cairn.dev/cairn/pkg/supervisor"
	api "cairn.dev/cairn/proto/api"
	private "cairn.dev/cairn/proto/private"
)

// bootstrap makes this node the first of a new cluster. It prepares the
// keys and the data partition and hands the role server a Membership whose
// Bootstrap function finishes the job on the fresh etcd: the cluster's
// state, the node certificate, and the sealed configuration, written last.
// Until that file exists, a reboot starts the bootstrap over on a new
// data partition, as nothing of the cluster can have been used yet.
func (s *Service) bootstrap(ctx context.Context, p *api.NodeParameters_ClusterBootstrap) (*roleserve.Membership, error) {
	log := supervisor.Logger(ctx)
	log.Infof("enrolment: bootstrapping a new cluster")
	conf := resolveConfiguration(p.GetInitialClusterConfiguration())
	plan, err := planSealing(conf.GetTpmMode(), s.openTPM)
	if err != nil {
		log.Errorf("enrolment: cannot bootstrap: %v", err)
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
	id := identity.NodeID(keys.node.Public().(ed25519.PublicKey))
	sc := &private.SealedConfiguration{
		NodeUnlockKey:    keys.nodeUnlockKey,
		JoinKey:          keys.join.Seed(),
		StorageSecurity:  storageSecurity(conf),
		ClusterUnlockKey: keys.clusterUnlockKey,
		NodeId:           id,
	}
	if sc.StorageSecurity == private.StorageSecurity_STORAGE_SECURITY_INSECURE {
		sc.NodeUnlockKey = nil
		log.Warningf("enrolment: the cluster's storage security policy is INSECURE: the data partition is not encrypted")
	}
	if !s.mounted {
		if err := mountNew(ctx, s.storage, sc); err != nil {
			return nil, fmt.Errorf("when creating the data partition: %w", err)
		}
		s.mounted = true
	}
	dir := &api.ClusterDirectory{Nodes: []*api.ClusterDirectory_Node{{
		Id:        id,
		PublicKey: keys.node.Public().(ed25519.PublicKey),
		Addresses: []*api.ClusterDirectory_Node_Address{{Host: addr.String()}},
	}}}
	b := &bootstrapper{
		s:     s,
		log:   log,
		owner: ed25519.PublicKey(p.GetOwnerPublicKey()),
		conf:  conf,
		keys:  keys,
		addr:  addr,
		sc:    sc,
		plan:  plan,
		dir:   dir,
	}
	return &roleserve.Membership{
		NodeKey:          keys.node,
		Bootstrap:        b.run,
		InitialRoles:     &api.NodeRoles{ConsensusMember: &api.NodeRoles_ConsensusMember{}},
		ClusterDirectory: dir,
	}, nil
}

// bootstrapper is the Bootstrap function handed to the role server, with
// what it needs.
type bootstrapper struct {
	s     *Service
	log   logtree.LeveledLogger
	owner ed25519.PublicKey
	conf  *api.ClusterConfiguration
	keys  *nodeKeys
	addr  netip.Addr
	sc    *private.SealedConfiguration
	plan  sealPlan
	dir   *api.ClusterDirectory
}

// run writes the new cluster's state into etcd, stores the node's
// identity, seals the configuration and writes the cluster directory.
// Every step is idempotent, so run may be called again after an error.
func (b *bootstrapper) run(ctx context.Context, etcd *consensus.Client) (*identity.Node, error) {
	pub := b.keys.node.Public().(ed25519.PublicKey)
	certDER, caDER, err := curator.IssueNodeCertificate(ctx, etcd, pub)
	if err != nil {
		return nil, fmt.Errorf("when issuing the node certificate: %w", err)
	}
	node, err := identity.NewNode(b.keys.node, certDER, caDER)
	if err != nil {
		return nil, fmt.Errorf("when checking the node certificate: %w", err)
	}
	err = curator.Bootstrap(ctx, etcd, curator.BootstrapState{
		OwnerPublicKey:   b.owner,
		Configuration:    b.conf,
		NodePublicKey:    pub,
		JoinPublicKey:    b.keys.join.Public().(ed25519.PublicKey),
		ClusterUnlockKey: b.keys.clusterUnlockKey,
		Status: &api.NodeStatus{
			ExternalAddress:    b.addr.String(),
			TimestampUnixNanos: time.Now().UnixNano(),
		},
	})
	if err != nil {
		return nil, fmt.Errorf("when writing the cluster's initial state: %w", err)
	}
	if err := writeIdentity(b.s.root, node); err != nil {
		return nil, err
	}
	sc := cloneSealed(b.sc)
	sc.ClusterCaCertificate = caDER
	if err := b.s.writeSealed(b.log, sc, b.plan); err != nil {
		return nil, err
	}
	if err := b.s.writeDirectory(b.dir); err != nil {
		return nil, err
	}
	b.log.Infof("enrolment: bootstrapped cluster as %s", node.ID())
	b.log.Infof("enrolment: cluster CA SHA256:%x (compare with what cairnctl takeownership prints)", sha256.Sum256(caDER))
	return node, nil
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
