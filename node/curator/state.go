package curator

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"cairn.dev/cairn/node/consensus"
	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/node/localstorage"
	"cairn.dev/cairn/pkg/pki"
	"cairn.dev/cairn/proto/api"
	"cairn.dev/cairn/proto/private"
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
	// current owner key is in the owner trust (owner.go).
	ownerKey = "owner/public_key"
	// ticketKey holds the register ticket, raw.
	ticketKey = "register_ticket"
	// configurationKey holds the api.ClusterConfiguration.
	configurationKey = "configuration"
)

// ticketSize is the length of a fresh register ticket.
const ticketSize = 32

// newTicket draws a fresh register ticket.
func newTicket() ([]byte, error) {
	ticket := make([]byte, ticketSize)
	if _, err := rand.Read(ticket); err != nil {
		return nil, fmt.Errorf("when drawing the register ticket: %w", err)
	}
	return ticket, nil
}

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
	want := localstorage.KeySize
	if insecure(c) {
		want = 0
	}
	if len(b.ClusterUnlockKey) != want {
		return fmt.Errorf("cluster unlock key is %d bytes, want %d for storage security %s", len(b.ClusterUnlockKey), want, c.StorageSecurityPolicy)
	}
	return nil
}

// insecure says whether the cluster's nodes store their data unencrypted.
func insecure(c *api.ClusterConfiguration) bool {
	return c.GetStorageSecurityPolicy() == api.StorageSecurityPolicy_STORAGE_SECURITY_POLICY_INSECURE
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

// nodeIDFromKey returns the node ID in an etcd key under nodePrefix.
func nodeIDFromKey(key []byte) string {
	return strings.TrimPrefix(string(key), nodePrefix)
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
