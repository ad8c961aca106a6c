// Package curatortest starts a one-node control plane in the test
// process, from real components only:
//
//	consensustest.Member ──▶ curator.Bootstrap ──▶ curator.Service
//	  (embedded etcd)         (owner, config,        (AAA, Management,
//	                           this node UP)          Curator on loopback)
//
// A test talks to it as to a cluster: as the owner (OwnerConn, or
// AAA.Escrow with OwnerKey, as cairnctl's tests do), or with the node
// identity it serves with. IssueOwnerCertificate also serves tests that
// bootstrap a cluster of their own, like the role server's.
//
// The curator's own tests cannot use it (this package imports curator).
// Only tests import it.
package curatortest

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"

	"cairn.dev/cairn/node/consensus"
	"cairn.dev/cairn/node/consensus/consensustest"
	"cairn.dev/cairn/node/curator"
	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/node/localstorage"
	"cairn.dev/cairn/node/rpc"
	"cairn.dev/cairn/pkg/logtree"
	"cairn.dev/cairn/pkg/pki"
	"cairn.dev/cairn/proto/api"
)

// ControlPlane is a bootstrapped one-node cluster whose curator serves on
// Addr until the test ends.
type ControlPlane struct {
	// Member is the etcd member; Etcd is a client for its whole key space.
	Member *consensustest.Member
	Etcd   *consensus.Client
	// Node is the identity the curator serves with; CA is the cluster CA
	// certificate (DER) that issued it.
	Node *identity.Node
	CA   []byte
	// Addr is the curator's host:port on 127.0.0.1.
	Addr string
	// OwnerKey is the owner's private key given to the bootstrap.
	OwnerKey ed25519.PrivateKey
	// Configuration is the cluster configuration given to the bootstrap.
	Configuration *api.ClusterConfiguration

	ownerCert []byte
}

type options struct {
	ownerKey ed25519.PrivateKey
	curator  []curator.Option
}

// Option changes how StartControlPlane bootstraps the cluster.
type Option func(*options)

// WithOwnerKey bootstraps the cluster for key instead of a fresh one, as
// when a test has cairnctl generate the owner key.
func WithOwnerKey(key ed25519.PrivateKey) Option {
	return func(o *options) { o.ownerKey = key }
}

// ElectionTTL is the election lease of the curators of tests, set apart
// from a node's (curator.DefaultElectionTTL): a test built with the race
// detector on a busy machine stalls for seconds, and a lost lease there
// would fail a test of something else. make bench-failover measures the
// node's own TTL on a loaded machine.
const ElectionTTL = 10 * time.Second

// WithCuratorOptions starts the curator with opts, as when a test shortens
// the lifetime of owner certificates to see them renewed.
func WithCuratorOptions(opts ...curator.Option) Option {
	return func(o *options) { o.curator = append(o.curator, opts...) }
}

// StartControlPlane starts an etcd member, bootstraps a cluster on it
// (storage ENCRYPTED, TPM BEST_EFFORT) and starts a curator. The curator
// answers Management once it has won its election, shortly after.
func StartControlPlane(t testing.TB, opts ...Option) *ControlPlane {
	t.Helper()
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	member := consensustest.NewMember(t, nil)
	member.Start(t)
	st := member.WaitVoter(t)
	cp := &ControlPlane{
		Member:   member,
		Etcd:     st.Client(),
		OwnerKey: o.ownerKey,
		Configuration: &api.ClusterConfiguration{
			StorageSecurityPolicy: api.StorageSecurityPolicy_STORAGE_SECURITY_POLICY_ENCRYPTED,
			TpmMode:               api.TPMMode_TPM_MODE_BEST_EFFORT,
		},
	}
	if cp.OwnerKey == nil {
		cp.OwnerKey = newKey(t)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listening for the curator: %v", err)
	}
	advertise := lis.Addr().(*net.TCPAddr).AddrPort()
	cp.Addr = advertise.String()

	nodeKey := member.Config.PrivateKey
	nodePub := nodeKey.Public().(ed25519.PublicKey)
	unlock := make([]byte, localstorage.KeySize)
	rand.Read(unlock)
	err = curator.Bootstrap(ctx, cp.Etcd, curator.BootstrapState{
		OwnerPublicKey:   cp.OwnerKey.Public().(ed25519.PublicKey),
		Configuration:    cp.Configuration,
		NodePublicKey:    nodePub,
		JoinPublicKey:    newKey(t).Public().(ed25519.PublicKey),
		ClusterUnlockKey: unlock,
		Status: &api.NodeStatus{
			ExternalAddress: "127.0.0.1",
			RunningCurator:  &api.NodeStatus_RunningCurator{Port: int32(advertise.Port())},
			Version:         "test",
		},
	})
	if err != nil {
		t.Fatalf("curator.Bootstrap: %v", err)
	}
	certDER, caDER, err := curator.IssueNodeCertificate(ctx, cp.Etcd, nodePub)
	if err != nil {
		t.Fatalf("IssueNodeCertificate: %v", err)
	}
	if cp.Node, err = identity.NewNode(nodeKey, certDER, caDER); err != nil {
		t.Fatalf("NewNode: %v", err)
	}
	cp.CA = caDER
	if cp.ownerCert, err = IssueOwnerCertificate(ctx, cp.Etcd, cp.OwnerKey.Public().(ed25519.PublicKey)); err != nil {
		t.Fatal(err)
	}

	curatorOpts := append([]curator.Option{curator.WithElectionTTL(ElectionTTL)}, o.curator...)
	svc := curator.New(curator.Config{Node: cp.Node, Consensus: st, Advertise: advertise, Listener: lis}, curatorOpts...)
	stop := consensustest.RunTree(t, cp.Node.ID()[:12]+" curator ", svc.Run, logtree.New(), logtree.INFO)
	t.Cleanup(stop)
	return cp
}

// OwnerConn dials the curator as the owner, with a certificate issued
// straight from the cluster CA (no escrow), until the test ends.
func (cp *ControlPlane) OwnerConn(t testing.TB) *grpc.ClientConn {
	t.Helper()
	creds, err := rpc.OwnerCredentials(cp.OwnerKey, cp.ownerCert, cp.CA)
	if err != nil {
		t.Fatalf("OwnerCredentials: %v", err)
	}
	conn, err := grpc.NewClient(cp.Addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatalf("NewClient(%q): %v", cp.Addr, err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// IssueOwnerCertificate issues (or returns the already issued) owner
// certificate of the cluster CA for pub, as AAA.Escrow would once the
// owner proved its key. etcd is a client for the whole key space.
func IssueOwnerCertificate(ctx context.Context, etcd *consensus.Client, pub ed25519.PublicKey) ([]byte, error) {
	c := &pki.Certificate{
		Namespace: consensus.PKINamespace,
		Issuer:    consensus.ClusterCA(),
		Name:      "test-owner-" + identity.NodeID(pub),
		Template:  identity.OwnerCertificateTemplate(),
		Mode:      pki.ExternalKey,
		PublicKey: pub,
	}
	der, err := c.Ensure(ctx, etcd)
	if err != nil {
		return nil, fmt.Errorf("when issuing the owner certificate: %w", err)
	}
	return der, nil
}

func newKey(t testing.TB) ed25519.PrivateKey {
	t.Helper()
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatalf("generating key: %v", err)
	}
	return key
}
