package curator

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"cairn.dev/cairn/node/consensus"
	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/pkg/pki"
)

// The lifetimes of the certificates the cluster CA issues (docs/security.md
// says why these). A holder renews its certificate once half of its
// lifetime has passed: nodes through IssueCertificate, cairnctl through
// Escrow; a node that was powered off longer gets a fresh one from
// JoinNode.
const (
	DefaultNodeCertificateLifetime  = 30 * 24 * time.Hour
	DefaultOwnerCertificateLifetime = 7 * 24 * time.Hour
)

// nodeCertificate describes the node certificate of the node holding pub,
// issued by ca (consensus.ClusterCA, or a curator's cached copy of it), for
// lifetime.
func nodeCertificate(ca *pki.Certificate, pub ed25519.PublicKey, lifetime time.Duration) *pki.Certificate {
	return &pki.Certificate{
		Namespace: consensus.PKINamespace,
		Issuer:    ca,
		Name:      "node-" + identity.NodeID(pub),
		Template:  identity.NodeCertificateTemplate(pub),
		Mode:      pki.ExternalKey,
		PublicKey: pub,
		Lifetime:  lifetime,
	}
}

// ownerCertificate describes the owner certificate for the owner key pub,
// issued by ca, for lifetime.
func ownerCertificate(ca *pki.Certificate, pub ed25519.PublicKey, lifetime time.Duration) *pki.Certificate {
	return &pki.Certificate{
		Namespace: consensus.PKINamespace,
		Issuer:    ca,
		Name:      "owner",
		Template:  identity.OwnerCertificateTemplate(),
		Mode:      pki.ExternalKey,
		PublicKey: pub,
		Lifetime:  lifetime,
	}
}

// IssueNodeCertificate issues (or returns the already issued, while it is
// fresh) node certificate of the cluster CA for pub, valid for
// DefaultNodeCertificateLifetime, and returns it and the CA certificate,
// DER. etcd is a client for the whole key space.
func IssueNodeCertificate(ctx context.Context, etcd *consensus.Client, pub ed25519.PublicKey) (certDER, caDER []byte, err error) {
	if len(pub) != ed25519.PublicKeySize {
		return nil, nil, fmt.Errorf("node public key is %d bytes, want %d", len(pub), ed25519.PublicKeySize)
	}
	ca := consensus.ClusterCA()
	return issue(ctx, etcd, ca, nodeCertificate(ca, pub, DefaultNodeCertificateLifetime))
}

// issue ensures c and its issuer ca and returns both, DER. A stored c that
// has used up half of its lifetime is replaced by a new one
// (pki.Certificate.EnsureFresh), so that asking again renews it.
func issue(ctx context.Context, kv clientv3.KV, ca, c *pki.Certificate) (certDER, caDER []byte, err error) {
	caDER, err = ca.Ensure(ctx, kv)
	if err != nil {
		return nil, nil, fmt.Errorf("when loading the cluster CA: %w", err)
	}
	certDER, err = c.EnsureFresh(ctx, kv)
	if err != nil {
		return nil, nil, fmt.Errorf("when issuing certificate %s: %w", c.Name, err)
	}
	return certDER, caDER, nil
}

// checkClock refuses, with FailedPrecondition, to issue certificates while
// this node's clock is known wrong: their validity would start or end at
// the wrong time, and nodes with right clocks would refuse them.
func (c *curator) checkClock() error {
	if err := c.opts.clock.Check(); err != nil {
		return status.Errorf(codes.FailedPrecondition, "this curator issues no certificate now: %v", err)
	}
	return nil
}

// issueNode issues (or returns while fresh) the node certificate for pub,
// unless the clock is known wrong.
func (c *curator) issueNode(ctx context.Context, pub ed25519.PublicKey) (certDER, caDER []byte, err error) {
	if err := c.checkClock(); err != nil {
		return nil, nil, err
	}
	return issue(ctx, c.root, c.ca, nodeCertificate(c.ca, pub, c.opts.nodeLifetime))
}
