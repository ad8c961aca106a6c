package curator

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"cairn.dev/cairn/pkg/fixture"
	"cairn.dev/cairn/proto/api"
)

// TestRotateRegisterTicket rotates the register ticket while nodes wait in
// every state of enrolment: from then on RegisterNode refuses the old
// ticket and accepts the new one, and the nodes registered before register
// again, commit and join with their own keys as if nothing happened.
func TestRotateRegisterTicket(t *testing.T) {
	// Every node registers from 127.0.0.1, more often than one source may.
	c := newTestCluster(t, withLimits(func(l *limits) { l.registerInterval = 0 }))
	ctx := fixture.Context(t)
	addr := c.nodes[0].addr.String()
	m := c.mgmt(t, addr)
	old := currentTicket(ctx, t, m)

	// Before the rotation: one node UP, one approved (STANDBY), one NEW.
	up, approved, fresh := newTestNode(t), newTestNode(t), newTestNode(t)
	c.enrol(t, addr, up)
	for _, n := range []*testNode{approved, fresh} {
		if _, err := registerWith(ctx, t, c, addr, n, old); err != nil {
			t.Fatalf("RegisterNode of %s with the ticket: %v", n.id(), err)
		}
	}
	if _, err := m.ApproveNode(ctx, &api.ApproveNodeRequest{NodeId: approved.id()}); err != nil {
		t.Fatalf("ApproveNode: %v", err)
	}

	wrong := bytes.Clone(old)
	wrong[0] ^= 1
	for _, tc := range []struct {
		name     string
		previous []byte
		want     codes.Code
	}{
		{"no previous ticket", nil, codes.InvalidArgument},
		{"another previous ticket", wrong, codes.FailedPrecondition},
	} {
		if _, err := m.RotateRegisterTicket(ctx, &api.RotateRegisterTicketRequest{PreviousTicket: tc.previous}); status.Code(err) != tc.want {
			t.Errorf("RotateRegisterTicket with %s = %v, want %s", tc.name, err, tc.want)
		}
	}
	if got := currentTicket(ctx, t, m); !bytes.Equal(got, old) {
		t.Fatalf("after refused rotations the ticket is %x, want it unchanged, %x", got, old)
	}

	res, err := m.RotateRegisterTicket(ctx, &api.RotateRegisterTicketRequest{PreviousTicket: old})
	if err != nil {
		t.Fatalf("RotateRegisterTicket: %v", err)
	}
	rotated := res.GetTicket()
	if len(rotated) != ticketSize || bytes.Equal(rotated, old) {
		t.Fatalf("rotated ticket = %x, want %d fresh bytes", rotated, ticketSize)
	}
	if got := currentTicket(ctx, t, m); !bytes.Equal(got, rotated) {
		t.Errorf("GetRegisterTicket after rotating = %x, want the new ticket %x", got, rotated)
	}
	if _, err := m.RotateRegisterTicket(ctx, &api.RotateRegisterTicketRequest{PreviousTicket: old}); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("RotateRegisterTicket naming the replaced ticket = %v, want FailedPrecondition", err)
	}

	late := newTestNode(t)
	if _, err := registerWith(ctx, t, c, addr, late, old); status.Code(err) != codes.PermissionDenied {
		t.Errorf("RegisterNode with the old ticket = %v, want PermissionDenied", err)
	}
	if _, err := registerWith(ctx, t, c, addr, late, rotated); err != nil {
		t.Errorf("RegisterNode with the new ticket: %v", err)
	}
	wantState(t, m, late.id(), api.NodeState_NODE_STATE_NEW)

	// The nodes registered before go on with their keys alone, even when
	// they come back with the ticket they had, as after a power cut that
	// lost RegisterNode's answer: their keys, not the ticket, show who
	// they are. A stranger with those keys' ticket gains nothing.
	for _, n := range []*testNode{approved, fresh} {
		if _, err := registerWith(ctx, t, c, addr, n, old); err != nil {
			t.Errorf("RegisterNode again of %s with the ticket it registered with: %v", n.id(), err)
		}
	}
	stranger := newTestNode(t)
	stranger.key = fresh.key
	if _, err := registerWith(ctx, t, c, addr, stranger, old); status.Code(err) != codes.PermissionDenied {
		t.Errorf("RegisterNode with a known node key but another join key and the old ticket = %v, want PermissionDenied", err)
	}
	wantState(t, m, fresh.id(), api.NodeState_NODE_STATE_NEW)
	if _, err := m.ApproveNode(ctx, &api.ApproveNodeRequest{NodeId: fresh.id()}); err != nil {
		t.Fatalf("ApproveNode of the node registered before: %v", err)
	}
	for _, n := range []*testNode{approved, fresh} {
		if _, err := c.ephemeral(t, addr, n.key).CommitNode(ctx, &api.CommitNodeRequest{}); err != nil {
			t.Errorf("CommitNode of %s, registered before the rotation: %v", n.id(), err)
		}
		wantState(t, m, n.id(), api.NodeState_NODE_STATE_UP)
	}
	if _, err := c.ephemeral(t, addr, up.joinKey).JoinNode(ctx, &api.JoinNodeRequest{NodeId: up.id()}); err != nil {
		t.Errorf("JoinNode of %s, UP before the rotation: %v", up.id(), err)
	}
}

// TestRotateRegisterTicketConcurrently rotates the same ticket twice at
// once: one rotation wins, the other is refused, and the winner's ticket
// is the cluster's.
func TestRotateRegisterTicketConcurrently(t *testing.T) {
	c := newTestCluster(t)
	ctx := fixture.Context(t)
	m := c.mgmt(t, c.nodes[0].addr.String())
	old := currentTicket(ctx, t, m)

	type result struct {
		ticket []byte
		err    error
	}
	results := make([]result, 2)
	var wg sync.WaitGroup
	for i := range results {
		wg.Go(func() {
			res, err := m.RotateRegisterTicket(ctx, &api.RotateRegisterTicketRequest{PreviousTicket: old})
			results[i] = result{res.GetTicket(), err}
		})
	}
	wg.Wait()
	var won []byte
	refused := 0
	for _, r := range results {
		switch {
		case r.err == nil:
			won = r.ticket
		case status.Code(r.err) == codes.FailedPrecondition:
			refused++
		default:
			t.Errorf("RotateRegisterTicket = %v, want success or FailedPrecondition", r.err)
		}
	}
	if won == nil || refused != 1 {
		t.Fatalf("two rotations of one ticket = %+v, want one success and one FailedPrecondition", results)
	}
	if got := currentTicket(ctx, t, m); !bytes.Equal(got, won) {
		t.Errorf("ticket after the race = %x, want the winner's %x", got, won)
	}
}

// currentTicket returns the cluster's register ticket.
func currentTicket(ctx context.Context, t *testing.T, m api.ManagementClient) []byte {
	t.Helper()
	res, err := m.GetRegisterTicket(ctx, &api.GetRegisterTicketRequest{})
	if err != nil {
		t.Fatalf("GetRegisterTicket: %v", err)
	}
	return res.GetTicket()
}

// registerWith calls RegisterNode for n, with its node key and ticket.
func registerWith(ctx context.Context, t *testing.T, c *testCluster, addr string, n *testNode, ticket []byte) (*api.RegisterNodeResponse, error) {
	t.Helper()
	return c.ephemeral(t, addr, n.key).RegisterNode(ctx, &api.RegisterNodeRequest{
		RegisterTicket: ticket,
		JoinKey:        n.joinKey.Public().(ed25519.PublicKey),
	})
}
