package curator

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"net"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"

	"cairn.dev/cairn/node/identity/identitytest"
	"cairn.dev/cairn/node/localstorage"
	"cairn.dev/cairn/pkg/fixture"
	"cairn.dev/cairn/proto/api"
)

// TestBootstrap checks the state Bootstrap leaves, that it is idempotent,
// and that it refuses a cluster of another owner.
func TestBootstrap(t *testing.T) {
	c := newTestCluster(t)
	ctx := fixture.Context(t)
	n := c.nodes[0]
	st := n.member.WaitVoter(t)
	again := BootstrapState{
		OwnerPublicKey:   c.ownerKey.Public().(ed25519.PublicKey),
		Configuration:    c.config,
		NodePublicKey:    n.pub(),
		JoinPublicKey:    n.joinKey.Public().(ed25519.PublicKey),
		ClusterUnlockKey: bytes.Repeat([]byte{7}, localstorage.KeySize),
	}
	m := c.mgmt(t, n.addr.String())
	before, err := m.GetRegisterTicket(ctx, &api.GetRegisterTicketRequest{})
	if err != nil {
		t.Fatalf("GetRegisterTicket: %v", err)
	}
	if len(before.Ticket) != ticketSize {
		t.Errorf("ticket is %d bytes, want %d", len(before.Ticket), ticketSize)
	}
	if err := Bootstrap(ctx, st.Client(), again); err != nil {
		t.Fatalf("Bootstrap again: %v", err)
	}
	after, err := m.GetRegisterTicket(ctx, &api.GetRegisterTicketRequest{})
	if err != nil || !bytes.Equal(after.Ticket, before.Ticket) {
		t.Errorf("ticket after a second Bootstrap = %x, %v, want %x", after.GetTicket(), err, before.Ticket)
	}
	other := again
	other.OwnerPublicKey = identitytest.NewKey(t).Public().(ed25519.PublicKey)
	if err := Bootstrap(ctx, st.Client(), other); err == nil {
		t.Error("Bootstrap with another owner key succeeded")
	}

	nodes, err := m.GetNodes(ctx, &api.GetNodesRequest{})
	if err != nil {
		t.Fatalf("GetNodes: %v", err)
	}
	want := []*api.Node{{
		Id:        n.id(),
		PublicKey: n.pub(),
		State:     api.NodeState_NODE_STATE_UP,
		Roles:     &api.NodeRoles{ConsensusMember: &api.NodeRoles_ConsensusMember{}},
		Status:    &api.NodeStatus{ExternalAddress: "127.0.0.1", RunningCurator: &api.NodeStatus_RunningCurator{Port: int32(n.addr.Port())}},
		// No leader heard from it: the test runs no heartbeat.
		Health: api.NodeHealth_NODE_HEALTH_UNKNOWN,
	}}
	if diff := cmp.Diff(want, nodes.Nodes, protocmp.Transform()); diff != "" {
		t.Errorf("GetNodes (-want +got):\n%s", diff)
	}

	info, err := m.GetClusterInfo(ctx, &api.GetClusterInfoRequest{})
	if err != nil {
		t.Fatalf("GetClusterInfo: %v", err)
	}
	wantInfo := &api.GetClusterInfoResponse{
		ClusterDirectory: &api.ClusterDirectory{Nodes: []*api.ClusterDirectory_Node{{
			Id: n.id(), PublicKey: n.pub(), Addresses: []*api.ClusterDirectory_Node_Address{{Host: "127.0.0.1"}},
		}}},
		CaCertificate:        c.ca,
		ClusterConfiguration: c.config,
	}
	if diff := cmp.Diff(wantInfo, info, protocmp.Transform()); diff != "" {
		t.Errorf("GetClusterInfo (-want +got):\n%s", diff)
	}

	cert1, _, err := IssueNodeCertificate(ctx, st.Client(), n.pub())
	if err != nil || !bytes.Equal(cert1, n.ident.Certificate().Raw) {
		t.Errorf("IssueNodeCertificate again = %v, want the certificate issued first", err)
	}
}

// TestEscrow takes ownership, and is refused with a wrong key or proof.
func TestEscrow(t *testing.T) {
	c := newTestCluster(t)
	ctx := fixture.Context(t)
	addr := c.nodes[0].addr.String()
	// newTestCluster took ownership: the owner can call Management.
	if _, err := c.mgmt(t, addr).GetNodes(ctx, &api.GetNodesRequest{}); err != nil {
		t.Fatalf("GetNodes as owner: %v", err)
	}
	if _, err := escrow(ctx, t, addr, c.ca, identitytest.NewKey(t), nil); status.Code(err) != codes.PermissionDenied {
		t.Errorf("Escrow with a stranger's key = %v, want PermissionDenied", err)
	}
	bad := func(payload []byte) []byte { return ed25519.Sign(identitytest.NewKey(t), payload) }
	if _, err := escrow(ctx, t, addr, c.ca, c.ownerKey, bad); status.Code(err) != codes.PermissionDenied {
		t.Errorf("Escrow with a bad proof = %v, want PermissionDenied", err)
	}
	replay := func(payload []byte) []byte { return ed25519.Sign(c.ownerKey, append([]byte("x"), payload...)) }
	if _, err := escrow(ctx, t, addr, c.ca, c.ownerKey, replay); status.Code(err) != codes.PermissionDenied {
		t.Errorf("Escrow with a proof over other bytes = %v, want PermissionDenied", err)
	}
}

// TestRunFreesListener runs a curator that fails before it serves, as
// when its etcd member is not running: Run must close Config.Listener, so
// that the Run after it, or anyone, can listen on that port again.
func TestRunFreesListener(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := New(Config{Listener: lis})
	if err := s.Run(context.Background()); err == nil {
		t.Fatal("Run without a running etcd member = nil, want an error")
	}
	again, err := net.Listen("tcp", lis.Addr().String())
	if err != nil {
		lis.Close()
		t.Fatalf("listening on %s after a Run that failed: %v", lis.Addr(), err)
	}
	again.Close()
}

// TestListenAgain checks that a restarted Run gets a listener on the
// address of Config.Listener after serving closed the first.
func TestListenAgain(t *testing.T) {
	first, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := New(Config{Listener: first})
	lis, err := s.listen()
	if err != nil || lis != first {
		t.Fatalf("first listen() = %v, %v, want Config.Listener", lis, err)
	}
	first.Close()
	again, err := s.listen()
	if err != nil {
		t.Fatalf("listen() after a restart: %v", err)
	}
	defer again.Close()
	if again.Addr().String() != first.Addr().String() {
		t.Errorf("listen() after a restart is on %s, want %s", again.Addr(), first.Addr())
	}
}
