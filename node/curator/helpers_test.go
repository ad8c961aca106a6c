package curator

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"google.golang.org/grpc/credentials"

	"cairn.dev/cairn/node/consensus/consensustest"
	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/node/identity/identitytest"
	"cairn.dev/cairn/node/localstorage"
	"cairn.dev/cairn/node/rpc"
	"cairn.dev/cairn/node/rpc/rpctest"
	"cairn.dev/cairn/pkg/fixture"
	"cairn.dev/cairn/pkg/logtree"
	"cairn.dev/cairn/proto/api"
)

// testNode is a simulated consensus member: an etcd member and, once
// startCurator is called, a curator, each under a supervisor of its own,
// on 127.0.0.1.
type testNode struct {
	key     ed25519.PrivateKey
	joinKey ed25519.PrivateKey
	member  *consensustest.Member
	ident   *identity.Node
	addr    netip.AddrPort
	// lis listens on addr from the node's making until its first curator
	// takes it, so that no other server of the test (an etcd member's
	// peer port, chosen as a free port too) takes the port in between.
	lis net.Listener

	stopCurator func()
	curatorLog  *logtree.LogTree
}

func newTestNode(t testing.TB) *testNode {
	t.Helper()
	n := &testNode{key: identitytest.NewKey(t), joinKey: identitytest.NewKey(t)}
	n.member = consensustest.NewMember(t, n.key)
	lis := fixture.ListenBelowEphemeral(t)
	n.lis = lis
	n.addr = netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(lis.Addr().(*net.TCPAddr).Port))
	t.Cleanup(func() {
		if n.lis != nil {
			n.lis.Close()
		}
	})
	return n
}

func (n *testNode) pub() ed25519.PublicKey { return n.key.Public().(ed25519.PublicKey) }
func (n *testNode) id() string             { return identity.NodeID(n.pub()) }

// testElectionTTL is the election lease of the tests' curators, as
// curatortest.ElectionTTL (which this package cannot import) is.
const testElectionTTL = 10 * time.Second

// startCurator runs a curator with the node's identity, on its address.
func (n *testNode) startCurator(t testing.TB, opts ...Option) {
	t.Helper()
	st := n.member.WaitVoter(t)
	lis := n.lis
	n.lis = nil
	if lis == nil {
		// A curator started again listens on the address anew.
		var err error
		if lis, err = net.Listen("tcp", n.addr.String()); err != nil {
			t.Fatalf("listening on %s: %v", n.addr, err)
		}
	}
	opts = append([]Option{WithElectionTTL(testElectionTTL)}, opts...)
	svc := New(Config{Node: n.ident, Consensus: st, Advertise: n.addr, Listener: lis}, opts...)
	lt := logtree.New()
	n.curatorLog = lt
	n.stopCurator = consensustest.RunTree(t, n.id()[:12]+" curator ", svc.Run, lt, logtree.INFO)
	t.Cleanup(n.stopCurator)
}

// testCluster is a cluster bootstrapped on its first node, with an owner.
type testCluster struct {
	nodes    []*testNode
	ownerKey ed25519.PrivateKey
	ca       []byte
	owner    credentials.TransportCredentials
	config   *api.ClusterConfiguration
}

// newTestCluster bootstraps a cluster on one node and starts its curator.
func newTestCluster(t testing.TB, opts ...Option) *testCluster {
	t.Helper()
	ctx := fixture.Context(t)
	c := &testCluster{ownerKey: identitytest.NewKey(t), config: &api.ClusterConfiguration{
		StorageSecurityPolicy: api.StorageSecurityPolicy_STORAGE_SECURITY_POLICY_ENCRYPTED,
		TpmMode:               api.TPMMode_TPM_MODE_BEST_EFFORT,
	}}
	n := newTestNode(t)
	n.member.Start(t)
	st := n.member.WaitVoter(t)
	err := Bootstrap(ctx, st.Client(), BootstrapState{
		OwnerPublicKey:   c.ownerKey.Public().(ed25519.PublicKey),
		Configuration:    c.config,
		NodePublicKey:    n.pub(),
		JoinPublicKey:    n.joinKey.Public().(ed25519.PublicKey),
		ClusterUnlockKey: bytes.Repeat([]byte{7}, localstorage.KeySize),
		Status:           &api.NodeStatus{ExternalAddress: "127.0.0.1", RunningCurator: &api.NodeStatus_RunningCurator{Port: int32(n.addr.Port())}},
	})
	if err != nil {
		t.Fatalf("Bootstrap: %v", err)
	}
	cert, ca, err := IssueNodeCertificate(ctx, st.Client(), n.pub())
	if err != nil {
		t.Fatalf("IssueNodeCertificate: %v", err)
	}
	if n.ident, err = identity.NewNode(n.key, cert, ca); err != nil {
		t.Fatalf("NewNode: %v", err)
	}
	c.ca = ca
	c.nodes = append(c.nodes, n)
	n.startCurator(t, opts...)
	c.owner = c.takeOwnership(t, n.addr.String())
	return c
}

// takeOwnership runs AAA.Escrow against addr with the owner key and
// returns owner credentials with the certificate it gave.
func (c *testCluster) takeOwnership(t testing.TB, addr string) credentials.TransportCredentials {
	t.Helper()
	res, err := escrow(fixture.Context(t), t, addr, c.ca, c.ownerKey, nil)
	if err != nil {
		t.Fatalf("Escrow: %v", err)
	}
	creds, err := rpc.OwnerCredentials(c.ownerKey, res.OwnerCertificate, res.CaCertificate)
	if err != nil {
		t.Fatalf("OwnerCredentials: %v", err)
	}
	return creds
}

// escrow runs AAA.Escrow with key; sign, when set, replaces the proof.
func escrow(ctx context.Context, t testing.TB, addr string, ca []byte, key ed25519.PrivateKey, sign func(payload []byte) []byte) (*api.EscrowFromServer_Result, error) {
	creds, err := rpc.EphemeralCredentials(ca, nil)
	if err != nil {
		t.Fatalf("EphemeralCredentials: %v", err)
	}
	conn := dial(t, addr, creds)
	stream, err := api.NewAAAClient(conn).Escrow(ctx)
	if err != nil {
		return nil, err
	}
	hello := &api.EscrowFromClient{Step: &api.EscrowFromClient_Hello_{Hello: &api.EscrowFromClient_Hello{OwnerPublicKey: key.Public().(ed25519.PublicKey)}}}
	if err := stream.Send(hello); err != nil {
		return nil, err
	}
	msg, err := stream.Recv()
	if err != nil {
		return nil, err
	}
	cs, ok := rpc.TLSConnectionState(stream.Context())
	if !ok {
		t.Fatal("escrow stream has no TLS state")
	}
	payload, err := rpc.EscrowProofPayload(msg.GetChallenge().GetNonce(), cs)
	if err != nil {
		t.Fatalf("EscrowProofPayload: %v", err)
	}
	sig := ed25519.Sign(key, payload)
	if sign != nil {
		sig = sign(payload)
	}
	proof := &api.EscrowFromClient{Step: &api.EscrowFromClient_Proof_{Proof: &api.EscrowFromClient_Proof{Signature: sig}}}
	if err := stream.Send(proof); err != nil {
		return nil, err
	}
	msg, err = stream.Recv()
	if err != nil {
		return nil, err
	}
	return msg.GetResult(), nil
}

// mgmt dials addr as the owner.
func (c *testCluster) mgmt(t testing.TB, addr string) api.ManagementClient {
	return api.NewManagementClient(dial(t, addr, c.owner))
}

// ephemeral dials addr with a self-signed certificate of key.
func (c *testCluster) ephemeral(t testing.TB, addr string, key ed25519.PrivateKey) api.CuratorClient {
	creds, err := rpc.EphemeralCredentials(c.ca, key)
	if err != nil {
		t.Fatalf("EphemeralCredentials: %v", err)
	}
	return api.NewCuratorClient(dial(t, addr, creds))
}

// enrol registers, approves and commits n through the curator at addr,
// and gives n its identity.
func (c *testCluster) enrol(t testing.TB, addr string, n *testNode) *api.CommitNodeResponse {
	t.Helper()
	ctx := fixture.Context(t)
	ticket, err := c.mgmt(t, addr).GetRegisterTicket(ctx, &api.GetRegisterTicketRequest{})
	if err != nil {
		t.Fatalf("GetRegisterTicket: %v", err)
	}
	cur := c.ephemeral(t, addr, n.key)
	if _, err := cur.RegisterNode(ctx, &api.RegisterNodeRequest{RegisterTicket: ticket.Ticket, JoinKey: n.joinKey.Public().(ed25519.PublicKey)}); err != nil {
		t.Fatalf("RegisterNode: %v", err)
	}
	if _, err := c.mgmt(t, addr).ApproveNode(ctx, &api.ApproveNodeRequest{NodeId: n.id()}); err != nil {
		t.Fatalf("ApproveNode: %v", err)
	}
	res, err := cur.CommitNode(ctx, &api.CommitNodeRequest{})
	if err != nil {
		t.Fatalf("CommitNode: %v", err)
	}
	if err := setIdentity(n, res); err != nil {
		t.Fatal(err)
	}
	return res
}

// setIdentity gives n the identity CommitNode handed it.
func setIdentity(n *testNode, res *api.CommitNodeResponse) error {
	var err error
	n.ident, err = identity.NewNode(n.key, res.NodeCertificate, res.CaCertificate)
	if err != nil {
		return fmt.Errorf("NewNode from CommitNode: %w", err)
	}
	return nil
}

// nodeClient dials addr with n's node certificate.
func (n *testNode) client(t testing.TB, addr string) api.CuratorClient {
	return api.NewCuratorClient(dial(t, addr, rpc.NodeCredentials(n.ident)))
}

// dial connects to addr with creds until the test ends.
var dial = rpctest.Dial
