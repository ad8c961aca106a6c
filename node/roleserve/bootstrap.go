package roleserve

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"fmt"
	"time"

	"cairn.dev/cairn/node/consensus"
	"cairn.dev/cairn/node/curator"
	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/pkg/logtree"
	api "cairn.dev/cairn/proto/api"
)

// bootstrapCluster writes a new cluster's initial state into its first
// etcd (owner key, configuration, this node's record), issues this node's
// certificate and returns its credentials. Every step is idempotent: after
// an error, or a restart of the curator's runnable, it runs again on the
// same etcd and returns the same credentials.
func bootstrapCluster(ctx context.Context, log logtree.LeveledLogger, etcd *consensus.Client, key ed25519.PrivateKey, b *Bootstrap) (*identity.Node, error) {
	pub := key.Public().(ed25519.PublicKey)
	certDER, caDER, err := curator.IssueNodeCertificate(ctx, etcd, pub)
	if err != nil {
		return nil, fmt.Errorf("when issuing the node certificate: %w", err)
	}
	node, err := identity.NewNode(key, certDER, caDER)
	if err != nil {
		return nil, fmt.Errorf("when checking the node certificate: %w", err)
	}
	err = curator.Bootstrap(ctx, etcd, curator.BootstrapState{
		OwnerPublicKey:   b.OwnerPublicKey,
		Configuration:    b.Configuration,
		NodePublicKey:    pub,
		JoinPublicKey:    b.JoinPublicKey,
		ClusterUnlockKey: b.ClusterUnlockKey,
		SealsWithTPM:     b.SealsWithTPM,
		Status: &api.NodeStatus{
			ExternalAddress:    b.ExternalAddress.String(),
			TimestampUnixNanos: time.Now().UnixNano(),
		},
	})
	if err != nil {
		return nil, fmt.Errorf("when writing the cluster's initial state: %w", err)
	}
	log.Infof("Cluster state written; cluster CA SHA256:%x (compare with what cairnctl takeownership prints)", sha256.Sum256(caDER))
	return node, nil
}
