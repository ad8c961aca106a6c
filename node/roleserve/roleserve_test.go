package roleserve

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/node/identity/identitytest"
	"cairn.dev/cairn/node/marker"
	"cairn.dev/cairn/node/rpc"
	"cairn.dev/cairn/pkg/event"
	"cairn.dev/cairn/pkg/fixture"
	api "cairn.dev/cairn/proto/api"
)

// getNode returns what the curator at cc knows of node id.
func getNode(ctx context.Context, cc *grpc.ClientConn, id string) (*api.Node, error) {
	res, err := api.NewManagementClient(cc).GetNodes(ctx, &api.GetNodesRequest{Filter: &api.NodeFilter{Ids: []string{id}}})
	if err != nil {
		return nil, err
	}
	if len(res.Nodes) != 1 {
		return nil, fmt.Errorf("GetNodes(%s) returned %d nodes", id, len(res.Nodes))
	}
	return res.Nodes[0], nil
}

// TestCluster runs a cluster of two role servers in this process: the
// first bootstraps it, the second registers, is given ConsensusMember,
// joins etcd as a learner, is promoted and serves a curator, then loses
// the role again.
func TestCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("runs etcd and curators for about a minute; skipped under -short")
	}
	ctx := fixture.Context(t)
	o := &owner{key: identitytest.NewKey(t)}

	// Node A bootstraps the cluster. Its curator tells B, which joins
	// through it, to peer on a port of its own: both share 127.0.0.1.
	bPeerPort := fixture.FreePort(t)
	a := newTestNode(t, fixture.FreePort(t), fixture.FreePort(t), bPeerPort, 0)
	t0 := time.Now()
	a.membership.Set(&Membership{
		NodeKey:      a.key,
		Bootstrap:    o.bootstrap(a),
		InitialRoles: &api.NodeRoles{ConsensusMember: &api.NodeRoles_ConsensusMember{}},
	})
	a.start(t)
	a.waitMarker(t, marker.ConsensusRunning, 2*time.Minute, "voting", "true")
	tEtcd := time.Since(t0)
	a.waitMarker(t, marker.CuratorServing, time.Minute, "addr", a.curatorAddr())
	tCurator := time.Since(t0)

	mgmt := o.dial(t, a.curatorAddr())
	fixture.Eventually(t, time.Minute, "status and heartbeat of A", func() error {
		n, err := getNode(ctx, mgmt, a.id())
		if err != nil {
			return err
		}
		want := &api.NodeStatus{
			ExternalAddress: a.ip.String(),
			Version:         "test",
			SystemSlot:      "b",
			RunningCurator:  &api.NodeStatus_RunningCurator{Port: int32(a.cfg.Ports.Curator)},
			Clock: &api.ClockStatus{
				State:             api.ClockState_CLOCK_STATE_SYNCHRONIZED,
				Server:            "127.0.0.123",
				OffsetNanos:       1500000,
				LastSyncUnixNanos: testClock.LastSync.UnixNano(),
			},
		}
		got := proto.Clone(n.GetStatus()).(*api.NodeStatus)
		if got != nil {
			got.TimestampUnixNanos = 0
		}
		if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
			return fmt.Errorf("status (-want +got):\n%s", diff)
		}
		if n.LastHeartbeatUnixNanos == 0 {
			return fmt.Errorf("no heartbeat recorded")
		}
		return nil
	})
	tStatus := time.Since(t0)

	// What A says about its desired release reaches the curator in its
	// status.
	done := &api.UpdateStatus{RolloutId: "r1", Version: "test", Phase: api.UpdatePhase_UPDATE_PHASE_DONE}
	a.svc.SetUpdateStatus(done)
	if _, err := event.Get(ctx, a.svc.UpdatePushed(), event.Filter(func(u *api.UpdateStatus) bool { return proto.Equal(u, done) })); err != nil {
		t.Fatalf("waiting for A's update status to be pushed: %v", err)
	}
	n, err := getNode(ctx, mgmt, a.id())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(done, n.GetStatus().GetUpdate(), protocmp.Transform()); diff != "" {
		t.Errorf("update status of A as the curator has it (-want +got):\n%s", diff)
	}

	fixture.Eventually(t, 30*time.Second, "roles.pb of A", func() error {
		return wantRolesFile(a, &api.NodeRoles{ConsensusMember: &api.NodeRoles_ConsensusMember{}})
	})
	fixture.Eventually(t, 30*time.Second, "cluster directory of A", func() error {
		return wantDirectory(a, a)
	})
	t.Logf("A: etcd voting after %v, curator serving after %v, status and heartbeat after %v", tEtcd, tCurator, tStatus)

	// Node B registers, is approved and commits, then gets
	// ConsensusMember. Its etcd peers on the port A's curator gives it.
	b := newTestNode(t, fixture.FreePort(t), bPeerPort, bPeerPort, a.cfg.Ports.Curator)
	bCreds := enrol(t, o, mgmt, a, b)
	b.membership.Set(&Membership{
		NodeKey:     b.key,
		Credentials: bCreds,
		ClusterDirectory: &api.ClusterDirectory{Nodes: []*api.ClusterDirectory_Node{{
			Id: a.id(), Addresses: []*api.ClusterDirectory_Node_Address{{Host: a.ip.String()}},
		}}},
	})
	b.start(t)
	fixture.Eventually(t, time.Minute, "heartbeat of B", func() error {
		n, err := getNode(ctx, mgmt, b.id())
		if err != nil {
			return err
		}
		if n.LastHeartbeatUnixNanos == 0 {
			return fmt.Errorf("no heartbeat recorded")
		}
		return nil
	})

	t1 := time.Now()
	setRole(t, mgmt, b.id(), true)
	b.waitMarker(t, marker.ConsensusRunning, 2*time.Minute, "voting", "false")
	tLearner := time.Since(t1)
	b.waitMarker(t, marker.ConsensusRunning, 2*time.Minute, "voting", "true")
	tVoter := time.Since(t1)
	b.waitMarker(t, marker.CuratorServing, time.Minute, "addr", b.curatorAddr())
	fixture.Eventually(t, time.Minute, "cluster directory of A and B", func() error {
		if err := wantDirectory(a, a, b); err != nil {
			return err
		}
		return wantDirectory(b, a, b)
	})
	t.Logf("B: learner %v after the role was given, voting after %v", tLearner, tVoter)

	// B loses the role: it leaves etcd and wipes its data.
	t2 := time.Now()
	setRole(t, mgmt, b.id(), false)
	b.waitMarker(t, marker.ConsensusStopped, 2*time.Minute)
	t.Logf("B: consensus stopped %v after the role was removed", time.Since(t2))
	if dirHasEntries(b.cfg.Storage.Root.Data.Etcd.FullPath()) {
		t.Errorf("etcd data of B is still there after the role was removed")
	}
	fixture.Eventually(t, time.Minute, "cluster directory of A alone", func() error {
		return wantDirectory(a, a)
	})
	if err := wantRolesFile(b, &api.NodeRoles{}); err != nil {
		t.Error(err)
	}

	// A cold restart of A, now the only member: a new role server on the
	// same storage, with the credentials of a join and no initial roles,
	// must bring etcd and the curator back from roles.pb alone.
	aCreds, err := waitFor(context.Background(), a.svc.Credentials(), "the credentials")
	if err != nil {
		t.Fatal(err)
	}
	b.stop()
	a.stop()
	a2 := &testNode{key: a.key, ip: a.ip, cfg: a.cfg}
	a2.cfg.Membership = &a2.membership
	a2.cfg.ExternalAddress = &a2.address
	a2.address.Set(netip.PrefixFrom(a.ip, 8))
	a2.membership.Set(&Membership{NodeKey: a.key, Credentials: aCreds})
	t3 := time.Now()
	a2.start(t)
	a2.waitMarker(t, marker.CuratorServing, 2*time.Minute, "addr", a.curatorAddr())
	t.Logf("A: curator serving %v after a cold restart", time.Since(t3))
	fixture.Eventually(t, time.Minute, "heartbeat of A after the restart", func() error {
		n, err := getNode(ctx, mgmt, a.id())
		if err != nil {
			return err
		}
		if time.Unix(0, n.LastHeartbeatUnixNanos).Before(t3) {
			return fmt.Errorf("no heartbeat since the restart")
		}
		return nil
	})
}

// enrol registers b through a's curator, approves it as o, and commits it;
// it returns b's credentials.
func enrol(t *testing.T, o *owner, mgmt *grpc.ClientConn, a, b *testNode) *identity.Node {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ticket, err := api.NewManagementClient(mgmt).GetRegisterTicket(ctx, &api.GetRegisterTicketRequest{})
	if err != nil {
		t.Fatalf("GetRegisterTicket: %v", err)
	}
	o.mu.Lock()
	caDER := o.caCert
	o.mu.Unlock()
	creds, err := rpc.EphemeralCredentials(caDER, b.key)
	if err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient(a.curatorAddr(), grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	cur := api.NewCuratorClient(cc)
	pub := b.key.Public().(ed25519.PublicKey)
	if _, err := cur.RegisterNode(ctx, &api.RegisterNodeRequest{RegisterTicket: ticket.Ticket, JoinKey: pub}); err != nil {
		t.Fatalf("RegisterNode: %v", err)
	}
	if _, err := api.NewManagementClient(mgmt).ApproveNode(ctx, &api.ApproveNodeRequest{NodeId: b.id()}); err != nil {
		t.Fatalf("ApproveNode: %v", err)
	}
	res, err := cur.CommitNode(ctx, &api.CommitNodeRequest{})
	if err != nil {
		t.Fatalf("CommitNode: %v", err)
	}
	n, err := identity.NewNode(b.key, res.NodeCertificate, res.CaCertificate)
	if err != nil {
		t.Fatalf("credentials of B: %v", err)
	}
	return n
}

func setRole(t *testing.T, mgmt *grpc.ClientConn, id string, member bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := api.NewManagementClient(mgmt).UpdateNodeRoles(ctx, &api.UpdateNodeRolesRequest{NodeId: id, ConsensusMember: &member}); err != nil {
		t.Fatalf("UpdateNodeRoles(%s, ConsensusMember: %v): %v", id, member, err)
	}
}

// wantRolesFile checks n's copy of its roles.
func wantRolesFile(n *testNode, want *api.NodeRoles) error {
	return wantProtoFile(n.cfg.Storage.Root.Data.Node.Roles.Read, want)
}

// wantProtoFile checks that the file read returns holds want.
func wantProtoFile(read func() ([]byte, error), want proto.Message) error {
	b, err := read()
	if err != nil {
		return err
	}
	got := want.ProtoReflect().New().Interface()
	if err := proto.Unmarshal(b, got); err != nil {
		return err
	}
	if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
		return fmt.Errorf("%s (-want +got):\n%s", want.ProtoReflect().Descriptor().Name(), diff)
	}
	return nil
}

// wantDirectory checks that n's cluster directory lists exactly members.
func wantDirectory(n *testNode, members ...*testNode) error {
	nodes := make(map[string]*api.Node)
	for _, m := range members {
		nodes[m.id()] = &api.Node{
			Id:        m.id(),
			PublicKey: m.key.Public().(ed25519.PublicKey),
			State:     api.NodeState_NODE_STATE_UP,
			Roles:     &api.NodeRoles{ConsensusMember: &api.NodeRoles_ConsensusMember{}},
			Status:    &api.NodeStatus{ExternalAddress: m.ip.String()},
		}
	}
	if err := wantProtoFile(n.cfg.Storage.Root.ESP.Cairn.ClusterDirectory.Read, clusterDirectory(nodes)); err != nil {
		return fmt.Errorf("on %s: %w", n.id(), err)
	}
	return nil
}
