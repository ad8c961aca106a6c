package curator

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"cairn.dev/cairn/pkg/fixture"
	"cairn.dev/cairn/proto/api"
)

// TestJoinSealing: a node that said at commit that it seals with its TPM
// is refused when it comes back with a plain configuration, and accepted
// with a sealed one; a node that never had a TPM joins plain in a cluster
// whose TPM mode allows it, but not once the cluster requires TPMs.
func TestJoinSealing(t *testing.T) {
	c := newTestCluster(t)
	ctx := fixture.Context(t)
	addr := c.nodes[0].addr.String()
	m := c.mgmt(t, addr)
	ticket, err := m.GetRegisterTicket(ctx, &api.GetRegisterTicketRequest{})
	if err != nil {
		t.Fatal(err)
	}
	commit := func(n *testNode, tpm bool) {
		t.Helper()
		cur := c.ephemeral(t, addr, n.key)
		if _, err := cur.RegisterNode(ctx, &api.RegisterNodeRequest{RegisterTicket: ticket.Ticket, JoinKey: n.joinKey.Public().(ed25519.PublicKey)}); err != nil {
			t.Fatalf("RegisterNode: %v", err)
		}
		if _, err := m.ApproveNode(ctx, &api.ApproveNodeRequest{NodeId: n.id()}); err != nil {
			t.Fatalf("ApproveNode: %v", err)
		}
		if _, err := cur.CommitNode(ctx, &api.CommitNodeRequest{SealsWithTpm: tpm}); err != nil {
			t.Fatalf("CommitNode: %v", err)
		}
	}
	join := func(n *testNode, tpm bool) error {
		_, err := c.ephemeral(t, addr, n.joinKey).JoinNode(ctx, &api.JoinNodeRequest{NodeId: n.id(), UnsealedWithTpm: tpm})
		return err
	}

	sealed, plain := newTestNode(t), newTestNode(t)
	commit(sealed, true)
	commit(plain, false)
	if err := join(sealed, false); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "plain") {
		t.Errorf("JoinNode of a TPM-sealing node with a plain configuration = %v, want PermissionDenied", err)
	}
	if err := join(sealed, true); err != nil {
		t.Errorf("JoinNode of a TPM-sealing node, sealed: %v", err)
	}
	if err := join(plain, false); err != nil {
		t.Errorf("JoinNode of a TPM-less node in a best-effort cluster: %v", err)
	}

	// The same cluster, had it required TPMs, would refuse the plain one.
	c.config.TpmMode = api.TPMMode_TPM_MODE_REQUIRED
	if err := setConfiguration(ctx, t, c, c.config); err != nil {
		t.Fatal(err)
	}
	if err := join(plain, false); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "requires") {
		t.Errorf("JoinNode with a plain configuration in a TPM-required cluster = %v, want PermissionDenied", err)
	}
}

// setConfiguration stores conf as the cluster configuration, as bootstrap
// did.
func setConfiguration(ctx context.Context, t *testing.T, c *testCluster, conf *api.ClusterConfiguration) error {
	etcd, err := curatorClient(c.nodes[0].member.WaitVoter(t).Client())
	if err != nil {
		return err
	}
	defer etcd.Close()
	b, err := proto.Marshal(conf)
	if err != nil {
		return err
	}
	if _, err := etcd.Put(ctx, configurationKey, string(b)); err != nil {
		return fmt.Errorf("when storing the configuration: %w", err)
	}
	return nil
}

// TestSecureBootRequired: in a cluster that requires Secure Boot, a node
// that says its firmware did not boot it so is refused at RegisterNode
// (a new node, and one registering again with its keys) and at
// JoinNode, saying why; one that says it did is taken. A cluster that
// does not require it takes both.
func TestSecureBootRequired(t *testing.T) {
	c := newTestCluster(t)
	ctx := fixture.Context(t)
	addr := c.nodes[0].addr.String()
	m := c.mgmt(t, addr)
	ticket, err := m.GetRegisterTicket(ctx, &api.GetRegisterTicketRequest{})
	if err != nil {
		t.Fatal(err)
	}
	register := func(n *testNode, secureBoot bool) error {
		_, err := c.ephemeral(t, addr, n.key).RegisterNode(ctx, &api.RegisterNodeRequest{
			RegisterTicket: ticket.Ticket, JoinKey: n.joinKey.Public().(ed25519.PublicKey), SecureBoot: secureBoot})
		return err
	}
	join := func(n *testNode, secureBoot bool) error {
		_, err := c.ephemeral(t, addr, n.joinKey).JoinNode(ctx, &api.JoinNodeRequest{NodeId: n.id(), UnsealedWithTpm: true, SecureBoot: secureBoot})
		return err
	}
	refused := func(err error) bool {
		return status.Code(err) == codes.PermissionDenied && strings.Contains(err.Error(), "requires Secure Boot")
	}

	// Before the requirement: a node without Secure Boot registers,
	// commits and joins.
	member := newTestNode(t)
	if err := register(member, false); err != nil {
		t.Fatalf("RegisterNode without Secure Boot, not required: %v", err)
	}
	if _, err := m.ApproveNode(ctx, &api.ApproveNodeRequest{NodeId: member.id()}); err != nil {
		t.Fatalf("ApproveNode: %v", err)
	}
	if _, err := c.ephemeral(t, addr, member.key).CommitNode(ctx, &api.CommitNodeRequest{SealsWithTpm: true}); err != nil {
		t.Fatalf("CommitNode: %v", err)
	}
	if err := join(member, false); err != nil {
		t.Errorf("JoinNode without Secure Boot, not required: %v", err)
	}
	waiting := newTestNode(t)
	if err := register(waiting, false); err != nil {
		t.Fatalf("RegisterNode without Secure Boot, not required: %v", err)
	}

	c.config.SecureBootRequired = true
	if err := setConfiguration(ctx, t, c, c.config); err != nil {
		t.Fatal(err)
	}
	if err := register(newTestNode(t), false); !refused(err) {
		t.Errorf("RegisterNode of a new node without Secure Boot, required = %v, want PermissionDenied saying why", err)
	}
	if err := register(waiting, false); !refused(err) {
		t.Errorf("RegisterNode again of a registered node without Secure Boot, required = %v, want PermissionDenied saying why", err)
	}
	if err := join(member, false); !refused(err) {
		t.Errorf("JoinNode without Secure Boot, required = %v, want PermissionDenied saying why", err)
	}
	// Five registrations at once is what one address may make.
	if err := register(waiting, true); err != nil {
		t.Errorf("RegisterNode again under Secure Boot, required: %v", err)
	}
	if err := join(member, true); err != nil {
		t.Errorf("JoinNode under Secure Boot, required: %v", err)
	}
}

// TestBoundSealRequired: in a cluster that requires seals bound to signed
// releases, a node that says its seal is not bound is refused at
// CommitNode and at JoinNode, saying why, and nothing of it changes; one
// that says it is commits and joins.
func TestBoundSealRequired(t *testing.T) {
	c := newTestCluster(t)
	ctx := fixture.Context(t)
	addr := c.nodes[0].addr.String()
	m := c.mgmt(t, addr)
	c.config.SecureBootRequired = true
	c.config.BoundSealRequired = true
	if err := setConfiguration(ctx, t, c, c.config); err != nil {
		t.Fatal(err)
	}
	ticket, err := m.GetRegisterTicket(ctx, &api.GetRegisterTicketRequest{})
	if err != nil {
		t.Fatal(err)
	}
	n := newTestNode(t)
	if _, err := c.ephemeral(t, addr, n.key).RegisterNode(ctx, &api.RegisterNodeRequest{
		RegisterTicket: ticket.Ticket, JoinKey: n.joinKey.Public().(ed25519.PublicKey), SecureBoot: true}); err != nil {
		t.Fatalf("RegisterNode: %v", err)
	}
	if _, err := m.ApproveNode(ctx, &api.ApproveNodeRequest{NodeId: n.id()}); err != nil {
		t.Fatalf("ApproveNode: %v", err)
	}
	refused := func(err error) bool {
		return status.Code(err) == codes.PermissionDenied && strings.Contains(err.Error(), "requires a seal bound to signed releases")
	}
	commit := func(bound bool) error {
		_, err := c.ephemeral(t, addr, n.key).CommitNode(ctx, &api.CommitNodeRequest{SealsWithTpm: true, SealBound: bound})
		return err
	}
	join := func(bound bool) error {
		_, err := c.ephemeral(t, addr, n.joinKey).JoinNode(ctx, &api.JoinNodeRequest{NodeId: n.id(), UnsealedWithTpm: true, SecureBoot: true, SealBound: bound})
		return err
	}
	if err := commit(false); !refused(err) {
		t.Fatalf("CommitNode with an unbound seal, bound required = %v, want PermissionDenied saying why", err)
	}
	nodes, err := m.GetNodes(ctx, &api.GetNodesRequest{})
	if err != nil {
		t.Fatalf("GetNodes: %v", err)
	}
	for _, got := range nodes.Nodes {
		if got.Id == n.id() && got.State != api.NodeState_NODE_STATE_STANDBY {
			t.Errorf("after the refused commit the node is %v, want STANDBY", got.State)
		}
	}
	if err := commit(true); err != nil {
		t.Fatalf("CommitNode with a bound seal, bound required: %v", err)
	}
	if err := join(false); !refused(err) {
		t.Errorf("JoinNode with an unbound seal, bound required = %v, want PermissionDenied saying why", err)
	}
	if err := join(true); err != nil {
		t.Errorf("JoinNode with a bound seal, bound required: %v", err)
	}
}
