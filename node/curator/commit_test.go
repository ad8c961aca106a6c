package curator

import (
	"bytes"
	"crypto/ed25519"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/node/localstorage"
	"cairn.dev/cairn/pkg/fixture"
	"cairn.dev/cairn/proto/api"
)

// TestCommitAgain commits nodes more than once, as a node does whose commit
// answer was lost and that asks again over a new connection: every answer
// is the first one (the cluster unlock key, a node certificate for the
// node's key from the cluster CA), the node stays UP and is listed once.
// Once decommissioned, a node is refused.
func TestCommitAgain(t *testing.T) {
	c := newTestCluster(t)
	ctx := fixture.Context(t)
	addr := c.nodes[0].addr.String()
	m := c.mgmt(t, addr)

	// One after the other.
	n := newTestNode(t)
	first := c.enrol(t, addr, n)
	again, err := c.ephemeral(t, addr, n.key).CommitNode(ctx, &api.CommitNodeRequest{})
	if err != nil {
		t.Fatalf("CommitNode again when UP: %v", err)
	}
	sameCommit(t, n, first, again)

	// At the same time, from STANDBY: one commits, the others must
	// answer as it did.
	n2 := newTestNode(t)
	ticket, err := m.GetRegisterTicket(ctx, &api.GetRegisterTicketRequest{})
	if err != nil {
		t.Fatalf("GetRegisterTicket: %v", err)
	}
	reg := &api.RegisterNodeRequest{RegisterTicket: ticket.Ticket, JoinKey: n2.joinKey.Public().(ed25519.PublicKey)}
	if _, err := c.ephemeral(t, addr, n2.key).RegisterNode(ctx, reg); err != nil {
		t.Fatalf("RegisterNode: %v", err)
	}
	if _, err := m.ApproveNode(ctx, &api.ApproveNodeRequest{NodeId: n2.id()}); err != nil {
		t.Fatalf("ApproveNode: %v", err)
	}
	answers := make([]*api.CommitNodeResponse, 4)
	errs := make([]error, len(answers))
	var wg sync.WaitGroup
	for i := range answers {
		cur := c.ephemeral(t, addr, n2.key)
		wg.Go(func() { answers[i], errs[i] = cur.CommitNode(ctx, &api.CommitNodeRequest{}) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("concurrent CommitNode %d: %v", i, err)
		}
		sameCommit(t, n2, answers[0], answers[i])
	}

	nodes, err := m.GetNodes(ctx, &api.GetNodesRequest{})
	if err != nil {
		t.Fatalf("GetNodes: %v", err)
	}
	seen := map[string]int{}
	for _, got := range nodes.Nodes {
		seen[got.Id]++
	}
	for _, id := range []string{c.nodes[0].id(), n.id(), n2.id()} {
		if seen[id] != 1 {
			t.Errorf("GetNodes lists %s %d times, want once", id, seen[id])
		}
	}
	if len(nodes.Nodes) != 3 {
		t.Errorf("GetNodes lists %d nodes, want 3", len(nodes.Nodes))
	}
	wantState(t, m, n.id(), api.NodeState_NODE_STATE_UP)
	wantState(t, m, n2.id(), api.NodeState_NODE_STATE_UP)
	join, err := c.ephemeral(t, addr, n.joinKey).JoinNode(ctx, &api.JoinNodeRequest{NodeId: n.id()})
	if err != nil {
		t.Fatalf("JoinNode: %v", err)
	}
	if !bytes.Equal(join.ClusterUnlockKey, first.ClusterUnlockKey) {
		t.Error("JoinNode gives another cluster unlock key than CommitNode did")
	}

	if _, err := m.DecommissionNode(ctx, &api.DecommissionNodeRequest{NodeId: n.id()}); err != nil {
		t.Fatalf("DecommissionNode: %v", err)
	}
	res, err := c.ephemeral(t, addr, n.key).CommitNode(ctx, &api.CommitNodeRequest{})
	if status.Code(err) != codes.FailedPrecondition {
		t.Errorf("CommitNode when decommissioned = %v, %v, want FailedPrecondition", res, err)
	}
	wantState(t, m, n.id(), api.NodeState_NODE_STATE_DECOMMISSIONED)
}

// sameCommit fails the test unless got answers n's commit as want did: the
// same CA and cluster unlock key, and a node certificate for n's key that
// the CA issued.
func sameCommit(t *testing.T, n *testNode, want, got *api.CommitNodeResponse) {
	t.Helper()
	if len(got.ClusterUnlockKey) != localstorage.KeySize || !bytes.Equal(got.ClusterUnlockKey, want.ClusterUnlockKey) {
		t.Errorf("%s: cluster unlock key of %d bytes, not the first answer's (%d bytes)", n.id(), len(got.ClusterUnlockKey), len(want.ClusterUnlockKey))
	}
	if !bytes.Equal(got.CaCertificate, want.CaCertificate) {
		t.Errorf("%s: answered with another CA certificate", n.id())
	}
	if _, err := identity.NewNode(n.key, got.NodeCertificate, want.CaCertificate); err != nil {
		t.Errorf("%s: node certificate: %v", n.id(), err)
	}
}
