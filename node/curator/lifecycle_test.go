package curator

import (
	"context"
	"crypto/ed25519"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"cairn.dev/cairn/node/identity/identitytest"
	"cairn.dev/cairn/node/localstorage"
	"cairn.dev/cairn/pkg/fixture"
	"cairn.dev/cairn/proto/api"
)

// TestLifecycle takes a node through register, approve, commit and join,
// with the refusals on the way: a wrong ticket, a commit before approval,
// a wrong join key, and a join after decommissioning.
func TestLifecycle(t *testing.T) {
	c := newTestCluster(t)
	ctx := fixture.Context(t)
	addr := c.nodes[0].addr.String()
	m := c.mgmt(t, addr)
	n := newTestNode(t)
	cur := c.ephemeral(t, addr, n.key)
	joinPub := n.joinKey.Public().(ed25519.PublicKey)

	ticket, err := m.GetRegisterTicket(ctx, &api.GetRegisterTicketRequest{})
	if err != nil {
		t.Fatalf("GetRegisterTicket: %v", err)
	}
	wrong := append([]byte{}, ticket.Ticket...)
	wrong[0] ^= 1
	if _, err := cur.RegisterNode(ctx, &api.RegisterNodeRequest{RegisterTicket: wrong, JoinKey: joinPub}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("RegisterNode with a wrong ticket = %v, want PermissionDenied", err)
	}
	anon := c.ephemeral(t, addr, nil)
	if _, err := anon.RegisterNode(ctx, &api.RegisterNodeRequest{RegisterTicket: ticket.Ticket, JoinKey: joinPub}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("RegisterNode without a certificate = %v, want Unauthenticated", err)
	}
	for range 2 { // the second time changes nothing
		reg, err := cur.RegisterNode(ctx, &api.RegisterNodeRequest{RegisterTicket: ticket.Ticket, JoinKey: joinPub})
		if err != nil {
			t.Fatalf("RegisterNode: %v", err)
		}
		if reg.ClusterConfiguration.GetStorageSecurityPolicy() != c.config.StorageSecurityPolicy {
			t.Errorf("RegisterNode configuration = %v, want %v", reg.ClusterConfiguration, c.config)
		}
	}
	if _, err := cur.RegisterNode(ctx, &api.RegisterNodeRequest{RegisterTicket: ticket.Ticket, JoinKey: identitytest.NewKey(t).Public().(ed25519.PublicKey)}); status.Code(err) != codes.AlreadyExists {
		t.Errorf("RegisterNode again with another join key = %v, want AlreadyExists", err)
	}
	wantState(t, m, n.id(), api.NodeState_NODE_STATE_NEW)

	if _, err := cur.CommitNode(ctx, &api.CommitNodeRequest{}); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("CommitNode before approval = %v, want FailedPrecondition", err)
	}
	for range 2 {
		if _, err := m.ApproveNode(ctx, &api.ApproveNodeRequest{NodeId: n.id()}); err != nil {
			t.Fatalf("ApproveNode: %v", err)
		}
	}
	wantState(t, m, n.id(), api.NodeState_NODE_STATE_STANDBY)
	res, err := cur.CommitNode(ctx, &api.CommitNodeRequest{})
	if err != nil {
		t.Fatalf("CommitNode: %v", err)
	}
	if len(res.ClusterUnlockKey) != localstorage.KeySize {
		t.Errorf("cluster unlock key is %d bytes, want %d", len(res.ClusterUnlockKey), localstorage.KeySize)
	}
	wantState(t, m, n.id(), api.NodeState_NODE_STATE_UP)
	// Committing again is answered alike (TestCommitAgain).

	// Join after a reboot, with the join key.
	joiner := c.ephemeral(t, addr, n.joinKey)
	join, err := joiner.JoinNode(ctx, &api.JoinNodeRequest{NodeId: n.id()})
	if err != nil {
		t.Fatalf("JoinNode: %v", err)
	}
	if string(join.ClusterUnlockKey) != string(res.ClusterUnlockKey) {
		t.Error("JoinNode returned another cluster unlock key than CommitNode")
	}
	if _, err := cur.JoinNode(ctx, &api.JoinNodeRequest{NodeId: n.id()}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("JoinNode with the node key instead of the join key = %v, want PermissionDenied", err)
	}

	// The committed node calls as a node.
	if err := setIdentity(n, res); err != nil {
		t.Fatal(err)
	}
	nc := n.client(t, addr)
	st := &api.NodeStatus{ExternalAddress: "127.0.0.2", Version: "test"}
	if _, err := nc.UpdateNodeStatus(ctx, &api.UpdateNodeStatusRequest{NodeId: n.id(), Status: st}); err != nil {
		t.Errorf("UpdateNodeStatus: %v", err)
	}
	if _, err := nc.UpdateNodeStatus(ctx, &api.UpdateNodeStatusRequest{NodeId: c.nodes[0].id(), Status: st}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("UpdateNodeStatus of another node = %v, want PermissionDenied", err)
	}
	hb, err := nc.Heartbeat(ctx, &api.HeartbeatRequest{})
	if err != nil || hb.IntervalMillis != DefaultHeartbeatInterval.Milliseconds() {
		t.Errorf("Heartbeat = %v, %v, want interval %v", hb, err, DefaultHeartbeatInterval)
	}
	got := getNode(t, m, n.id())
	if got.Status.GetVersion() != "test" || got.LastHeartbeatUnixNanos == 0 {
		t.Errorf("node after status and heartbeat = %v, want version test and a heartbeat", got)
	}
	cert, err := nc.IssueCertificate(ctx, &api.IssueCertificateRequest{Kind: api.CertificateKind_CERTIFICATE_KIND_NODE})
	if err != nil || len(cert.Certificate) == 0 {
		t.Errorf("IssueCertificate = %v, want a certificate", err)
	}

	// The last consensus member keeps its role.
	no := false
	if _, err := m.UpdateNodeRoles(ctx, &api.UpdateNodeRolesRequest{NodeId: c.nodes[0].id(), ConsensusMember: &no}); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("UpdateNodeRoles removing the last consensus member = %v, want FailedPrecondition", err)
	}

	// Roles, then decommissioning: the node may never join again.
	worker := true
	roles, err := m.UpdateNodeRoles(ctx, &api.UpdateNodeRolesRequest{NodeId: n.id(), KubernetesWorker: &worker})
	if err != nil || roles.Roles.GetKubernetesWorker() == nil {
		t.Errorf("UpdateNodeRoles(worker) = %v, %v, want the worker role", roles, err)
	}
	if _, err := m.DeleteNode(ctx, &api.DeleteNodeRequest{NodeId: n.id()}); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("DeleteNode of an UP node = %v, want FailedPrecondition", err)
	}
	if _, err := m.DecommissionNode(ctx, &api.DecommissionNodeRequest{NodeId: n.id()}); err != nil {
		t.Fatalf("DecommissionNode: %v", err)
	}
	_, err = joiner.JoinNode(ctx, &api.JoinNodeRequest{NodeId: n.id()})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "decommissioned") {
		t.Errorf("JoinNode when decommissioned = %v, want FailedPrecondition saying decommissioned", err)
	}
	if _, err := m.DeleteNode(ctx, &api.DeleteNodeRequest{NodeId: n.id()}); err != nil {
		t.Errorf("DeleteNode: %v", err)
	}
	if _, err := m.ApproveNode(ctx, &api.ApproveNodeRequest{NodeId: n.id()}); status.Code(err) != codes.NotFound {
		t.Errorf("ApproveNode of a deleted node = %v, want NotFound", err)
	}
	if _, err := m.ApproveNode(ctx, &api.ApproveNodeRequest{NodeId: "nope"}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("ApproveNode(nope) = %v, want InvalidArgument", err)
	}
}

// TestWatch watches every node: the backlog, then live changes and a
// deletion.
func TestWatch(t *testing.T) {
	c := newTestCluster(t, WithHeartbeatInterval(1500*time.Millisecond))
	ctx := fixture.Context(t)
	addr := c.nodes[0].addr.String()
	m := c.mgmt(t, addr)
	me := c.nodes[0].client(t, addr)
	hb, err := me.Heartbeat(ctx, &api.HeartbeatRequest{})
	if err != nil || hb.IntervalMillis != 1500 {
		t.Errorf("Heartbeat = %v, %v, want an interval of 1500 ms", hb, err)
	}
	l, err := currentLeader(t, c.nodes[0], addr)
	if err != nil || l.LeaderNodeId != c.nodes[0].id() || l.LeaderHost != "127.0.0.1" || int(l.LeaderPort) != int(c.nodes[0].addr.Port()) {
		t.Errorf("GetCurrentLeader = %v, %v, want %s at %s", l, err, c.nodes[0].id(), addr)
	}

	stream, err := me.Watch(ctx, &api.WatchRequest{Kind: &api.WatchRequest_NodesInCluster_{NodesInCluster: &api.WatchRequest_NodesInCluster{}}})
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	ev, err := stream.Recv()
	if err != nil {
		t.Fatalf("Watch backlog: %v", err)
	}
	if ev.Progress != api.WatchEvent_PROGRESS_LAST_BACKLOGGED || len(ev.Nodes) != 1 || ev.Nodes[0].Id != c.nodes[0].id() {
		t.Fatalf("Watch backlog = %v, want the bootstrap node, last backlogged", ev)
	}

	n := newTestNode(t)
	ticket, err := m.GetRegisterTicket(ctx, &api.GetRegisterTicketRequest{})
	if err != nil {
		t.Fatalf("GetRegisterTicket: %v", err)
	}
	if _, err := c.ephemeral(t, addr, n.key).RegisterNode(ctx, &api.RegisterNodeRequest{RegisterTicket: ticket.Ticket, JoinKey: n.joinKey.Public().(ed25519.PublicKey)}); err != nil {
		t.Fatalf("RegisterNode: %v", err)
	}
	ev = recvEvent(t, stream)
	if len(ev.Nodes) != 1 || ev.Nodes[0].Id != n.id() || ev.Nodes[0].State != api.NodeState_NODE_STATE_NEW {
		t.Errorf("Watch after RegisterNode = %v, want %s NEW", ev, n.id())
	}
	if _, err := m.DeleteNode(ctx, &api.DeleteNodeRequest{NodeId: n.id()}); err != nil {
		t.Fatalf("DeleteNode: %v", err)
	}
	ev = recvEvent(t, stream)
	if len(ev.NodeTombstones) != 1 || ev.NodeTombstones[0] != n.id() {
		t.Errorf("Watch after DeleteNode = %v, want a tombstone of %s", ev, n.id())
	}

	// One node: its own record.
	one, err := me.Watch(ctx, &api.WatchRequest{Kind: &api.WatchRequest_NodeInCluster_{NodeInCluster: &api.WatchRequest_NodeInCluster{NodeId: c.nodes[0].id()}}})
	if err != nil {
		t.Fatalf("Watch(one): %v", err)
	}
	if ev := recvEvent(t, one); len(ev.Nodes) != 1 || ev.Progress != api.WatchEvent_PROGRESS_LAST_BACKLOGGED {
		t.Errorf("Watch(one) backlog = %v, want one node", ev)
	}
	bad, err := me.Watch(ctx, &api.WatchRequest{})
	if err == nil {
		_, err = bad.Recv()
	}
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("Watch of nothing = %v, want InvalidArgument", err)
	}
}

// watchConfiguration opens a Watch of the cluster configuration at addr
// with n's node certificate, and returns the stream after its backlog
// event, which it checks holds the configuration.
func watchConfiguration(t *testing.T, n *testNode, addr string) (grpc.ServerStreamingClient[api.WatchEvent], *api.ClusterConfiguration) {
	t.Helper()
	stream, err := n.client(t, addr).Watch(fixture.Context(t), &api.WatchRequest{Kind: &api.WatchRequest_Configuration_{Configuration: &api.WatchRequest_Configuration{}}})
	if err != nil {
		t.Fatalf("Watch of the configuration: %v", err)
	}
	ev := recvEvent(t, stream)
	if ev.Progress != api.WatchEvent_PROGRESS_LAST_BACKLOGGED || ev.Configuration == nil {
		t.Fatalf("Watch backlog = %v, want the configuration, last of the backlog", ev)
	}
	return stream, ev.Configuration
}

func recvEvent(t *testing.T, s interface {
	Recv() (*api.WatchEvent, error)
}) *api.WatchEvent {
	t.Helper()
	ev, err := s.Recv()
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	return ev
}

func getNode(t *testing.T, m api.ManagementClient, id string) *api.Node {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := m.GetNodes(ctx, &api.GetNodesRequest{Filter: &api.NodeFilter{Ids: []string{id}}})
	if err != nil || len(resp.Nodes) != 1 {
		t.Fatalf("GetNodes(%s) = %v, %v, want one node", id, resp, err)
	}
	return resp.Nodes[0]
}

func wantState(t *testing.T, m api.ManagementClient, id string, want api.NodeState) {
	t.Helper()
	if got := getNode(t, m, id).State; got != want {
		t.Errorf("node %s is %s, want %s", id, got, want)
	}
}
