package curator

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"cairn.dev/cairn/node/rpc"
	"cairn.dev/cairn/pkg/fixture"
	"cairn.dev/cairn/proto/api"
)

// TestRevocation decommissions, then deletes, an UP node whose
// certificate is still valid: from the moment DecommissionNode returns,
// every node-facing call it makes is refused, through the leader and
// through a follower, and its open Watch streams end with
// PermissionDenied within one etcd watch delivery (the time is logged).
func TestRevocation(t *testing.T) {
	ports := &peerPorts{}
	c := newTestCluster(t, ports.option())
	ctx := fixture.Context(t)
	n0 := c.nodes[0]
	ports.set(n0.id(), n0.member.Config.Ports.EtcdPeer)
	leaderAddr := n0.addr.String()
	c.addMember(t, leaderAddr, newTestNode(t), ports)
	followerAddr := c.nodes[1].addr.String()
	waitLeader(t, c.nodes[1], followerAddr, "")
	m := c.mgmt(t, leaderAddr)

	n := newTestNode(t)
	if err := setIdentity(n, c.enrol(t, leaderAddr, n)); err != nil {
		t.Fatal(err)
	}
	via := map[string]api.CuratorClient{
		"leader":   n.client(t, leaderAddr),
		"follower": n.client(t, followerAddr),
	}
	all := &api.WatchRequest{Kind: &api.WatchRequest_NodesInCluster_{NodesInCluster: &api.WatchRequest_NodesInCluster{}}}
	streams := map[string]api.Curator_WatchClient{}
	// A stream that is not ended for the revocation ends here, as a
	// failure rather than a hang.
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for name, cur := range via {
		if _, err := cur.Heartbeat(ctx, &api.HeartbeatRequest{}); err != nil {
			t.Fatalf("Heartbeat via the %s while UP: %v", name, err)
		}
		s, err := cur.Watch(sctx, all)
		if err != nil {
			t.Fatalf("Watch via the %s: %v", name, err)
		}
		recvEvent(t, s) // the backlog: the stream is being served
		streams[name] = s
	}

	start := time.Now()
	if _, err := m.DecommissionNode(ctx, &api.DecommissionNodeRequest{NodeId: n.id()}); err != nil {
		t.Fatalf("DecommissionNode: %v", err)
	}
	wantRefused(t, ctx, via, n.id(), "DECOMMISSIONED")
	// Answers, refusals included, name the leader (rpc.LeaderTrailer).
	var trailer metadata.MD
	_, err := via["follower"].Heartbeat(ctx, &api.HeartbeatRequest{}, grpc.Trailer(&trailer))
	if got := trailer.Get(rpc.LeaderTrailer); status.Code(err) != codes.PermissionDenied || len(got) != 1 || got[0] != n0.id() {
		t.Errorf("refused Heartbeat via the follower = %v with leader trailer %q, want PermissionDenied naming %s", err, got, n0.id())
	}
	for name, s := range streams {
		for {
			_, err := s.Recv()
			if err == nil {
				continue // changes that raced the decommissioning
			}
			if status.Code(err) != codes.PermissionDenied || !rpc.IsDecommissioned(err) {
				t.Errorf("Watch via the %s ended with %v, want PermissionDenied marked as a decommissioning", name, err)
			}
			t.Logf("Watch via the %s ended %v after DecommissionNode was sent: %v", name, time.Since(start), err)
			break
		}
	}

	if _, err := m.DeleteNode(ctx, &api.DeleteNodeRequest{NodeId: n.id()}); err != nil {
		t.Fatalf("DeleteNode: %v", err)
	}
	wantRefused(t, ctx, via, n.id(), "deleted")

	// The members' own calls still pass.
	if _, err := c.nodes[1].client(t, followerAddr).Heartbeat(ctx, &api.HeartbeatRequest{}); err != nil {
		t.Errorf("Heartbeat of a member via the follower: %v", err)
	}
}

// TestStreamsAfterCompaction opens a node's streams after etcd compacted
// past the last change of its record, as the apiserver's compaction every
// five minutes does on a cluster with Kubernetes: they are served, and a
// revocation still ends them with PermissionDenied.
func TestStreamsAfterCompaction(t *testing.T) {
	c := newTestCluster(t)
	ctx := fixture.Context(t)
	addr := c.nodes[0].addr.String()
	n := newTestNode(t)
	if err := setIdentity(n, c.enrol(t, addr, n)); err != nil {
		t.Fatal(err)
	}
	// Writes of another key move etcd past the record's last change,
	// and the compaction drops every revision before the last.
	raw := c.nodes[0].member.WaitVoter(t).RawClient()
	var rev int64
	for i := range 3 {
		resp, err := raw.Put(ctx, "test/compaction", strconv.Itoa(i))
		if err != nil {
			t.Fatal(err)
		}
		rev = resp.Header.Revision
	}
	if _, err := raw.Compact(ctx, rev); err != nil {
		t.Fatalf("compacting etcd at %d: %v", rev, err)
	}

	cur := n.client(t, addr)
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	watch, err := cur.Watch(sctx, &api.WatchRequest{Kind: &api.WatchRequest_NodeInCluster_{NodeInCluster: &api.WatchRequest_NodeInCluster{NodeId: n.id()}}})
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	recvEvent(t, watch)
	leader, err := cur.GetCurrentLeader(sctx, &api.GetCurrentLeaderRequest{})
	if err != nil {
		t.Fatalf("GetCurrentLeader: %v", err)
	}
	if _, err := leader.Recv(); err != nil {
		t.Fatalf("GetCurrentLeader's first answer: %v", err)
	}

	if _, err := c.mgmt(t, addr).DecommissionNode(ctx, &api.DecommissionNodeRequest{NodeId: n.id()}); err != nil {
		t.Fatalf("DecommissionNode: %v", err)
	}
	for name, recv := range map[string]func() error{
		"Watch":            func() error { _, err := watch.Recv(); return err },
		"GetCurrentLeader": func() error { _, err := leader.Recv(); return err },
	} {
		var err error
		for err == nil {
			err = recv() // changes that came before the revocation
		}
		if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "DECOMMISSIONED") {
			t.Errorf("%s opened after the compaction ended with %v, want PermissionDenied once the node was decommissioned", name, err)
		}
	}
}

// wantRefused calls every node-facing method of the curator as a node
// whose certificate is no longer honoured, through each client of via,
// with valid requests, and wants each refused with PermissionDenied
// naming why.
func wantRefused(t *testing.T, ctx context.Context, via map[string]api.CuratorClient, id, why string) {
	t.Helper()
	for name, cur := range via {
		calls := map[string]func() error{
			"Heartbeat": func() error { _, err := cur.Heartbeat(ctx, &api.HeartbeatRequest{}); return err },
			"UpdateNodeStatus": func() error {
				_, err := cur.UpdateNodeStatus(ctx, &api.UpdateNodeStatusRequest{NodeId: id, Status: &api.NodeStatus{ExternalAddress: "127.0.0.3", Version: "test"}})
				return err
			},
			"IssueCertificate": func() error {
				_, err := cur.IssueCertificate(ctx, &api.IssueCertificateRequest{Kind: api.CertificateKind_CERTIFICATE_KIND_NODE})
				return err
			},
			"JoinConsensus": func() error {
				_, err := cur.JoinConsensus(ctx, &api.JoinConsensusRequest{PeerAddress: "127.0.0.1"})
				return err
			},
			"Watch": func() error {
				s, err := cur.Watch(ctx, &api.WatchRequest{Kind: &api.WatchRequest_NodeInCluster_{NodeInCluster: &api.WatchRequest_NodeInCluster{NodeId: id}}})
				if err == nil {
					_, err = s.Recv()
				}
				return err
			},
			"GetCurrentLeader": func() error {
				s, err := cur.GetCurrentLeader(ctx, &api.GetCurrentLeaderRequest{})
				if err == nil {
					_, err = s.Recv()
				}
				return err
			},
		}
		for method, call := range calls {
			err := call()
			if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), why) {
				t.Errorf("%s via the %s as %s node = %v, want PermissionDenied saying %s", method, name, why, err, why)
			}
			// Only a decommissioning is marked as one: the node gives up
			// its roles on it.
			if decommissioned := why == "DECOMMISSIONED"; rpc.IsDecommissioned(err) != decommissioned {
				t.Errorf("%s via the %s as %s node = %v, marked as a decommissioning: %v, want %v", method, name, why, err, rpc.IsDecommissioned(err), decommissioned)
			}
		}
	}
}
