package curator

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"cairn.dev/cairn/node/consensus"
	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/node/rpc"
	"cairn.dev/cairn/pkg/fixture"
	"cairn.dev/cairn/proto/api"
)

// peerPorts tells curators the etcd peer port of each test node: they all
// share 127.0.0.1, so none can listen on the real one.
type peerPorts struct {
	mu    sync.Mutex
	ports map[string]int
}

func (p *peerPorts) set(id string, port int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ports == nil {
		p.ports = make(map[string]int)
	}
	p.ports[id] = port
}

func (p *peerPorts) option() Option {
	return func(o *options) {
		o.peerPort = func(id string) int {
			p.mu.Lock()
			defer p.mu.Unlock()
			return p.ports[id]
		}
	}
}

// addMember enrols n through the curator at addr, gives it the
// ConsensusMember role, joins its etcd member through JoinConsensus, and
// starts its curator once it votes.
func (c *testCluster) addMember(t testing.TB, addr string, n *testNode, ports *peerPorts) {
	t.Helper()
	ctx := fixture.Context(t)
	c.enrol(t, addr, n)
	ports.set(n.id(), n.member.Config.Ports.EtcdPeer)
	yes := true
	if _, err := c.mgmt(t, addr).UpdateNodeRoles(ctx, &api.UpdateNodeRolesRequest{NodeId: n.id(), ConsensusMember: &yes}); err != nil {
		t.Fatalf("UpdateNodeRoles(%s, consensus member): %v", n.id(), err)
	}
	start := time.Now()
	j, err := n.client(t, addr).JoinConsensus(ctx, &api.JoinConsensusRequest{PeerAddress: "127.0.0.1"})
	if err != nil {
		t.Fatalf("JoinConsensus: %v", err)
	}
	n.member.Config.Join = &consensus.JoinCluster{
		InitialCluster:  j.InitialCluster,
		Peers:           j.Peers,
		CACertificate:   j.CaCertificate,
		CRL:             j.Crl,
		PeerCertificate: j.PeerCertificate,
	}
	n.member.Start(t)
	n.member.WaitVoter(t)
	t.Logf("%s: voting member %v after JoinConsensus", n.id(), time.Since(start))
	st := &api.NodeStatus{ExternalAddress: "127.0.0.1", RunningCurator: &api.NodeStatus_RunningCurator{Port: int32(n.addr.Port())}}
	if _, err := n.client(t, addr).UpdateNodeStatus(ctx, &api.UpdateNodeStatusRequest{NodeId: n.id(), Status: st}); err != nil {
		t.Fatalf("UpdateNodeStatus: %v", err)
	}
	n.startCurator(t, ports.option())
	c.nodes = append(c.nodes, n)
}

// currentLeader asks the curator at addr who leads, as node n.
func currentLeader(t testing.TB, n *testNode, addr string) (*api.GetCurrentLeaderResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := n.client(t, addr).GetCurrentLeader(ctx, &api.GetCurrentLeaderRequest{})
	if err != nil {
		return nil, err
	}
	return s.Recv()
}

// waitLeader waits until the curator at addr names a leader other than
// not, and returns it.
func waitLeader(t testing.TB, n *testNode, addr, not string) string {
	t.Helper()
	var id string
	fixture.Eventually(t, time.Minute, "waiting for a leader", func() error {
		l, err := currentLeader(t, n, addr)
		if err != nil {
			return err
		}
		if l.LeaderNodeId == "" || l.LeaderNodeId == not {
			return fmt.Errorf("leader is %q", l.LeaderNodeId)
		}
		id = l.LeaderNodeId
		return nil
	})
	return id
}

// TestHighAvailability forms a 3-member etcd with 3 curators through the
// API, checks that calls through followers reach the leader as the
// original caller, kills the leader's curator, and shrinks the cluster.
func TestHighAvailability(t *testing.T) {
	ports := &peerPorts{}
	c := newTestCluster(t, ports.option())
	ctx := fixture.Context(t)
	n0 := c.nodes[0]
	ports.set(n0.id(), n0.member.Config.Ports.EtcdPeer)
	addr0 := n0.addr.String()
	for range 2 {
		c.addMember(t, addr0, newTestNode(t), ports)
	}
	n1, n2 := c.nodes[1], c.nodes[2]
	if got := waitLeader(t, n1, n1.addr.String(), ""); got != n0.id() {
		t.Fatalf("leader seen by %s = %s, want %s", n1.id(), got, n0.id())
	}

	// The owner through a follower.
	via1 := c.mgmt(t, n1.addr.String())
	nodes, err := via1.GetNodes(ctx, &api.GetNodesRequest{Filter: &api.NodeFilter{Roles: &api.NodeRoles{ConsensusMember: &api.NodeRoles_ConsensusMember{}}}})
	if err != nil || len(nodes.Nodes) != 3 {
		t.Fatalf("GetNodes via a follower = %v, %v, want 3 consensus members", nodes, err)
	}
	info, err := via1.GetClusterInfo(ctx, &api.GetClusterInfoRequest{})
	if err != nil || len(info.ClusterDirectory.GetNodes()) != 3 {
		t.Errorf("GetClusterInfo via a follower = %v, %v, want 3 directory entries", info, err)
	}
	// A node through a follower is itself at the leader.
	if _, err := n2.client(t, n1.addr.String()).Heartbeat(ctx, &api.HeartbeatRequest{}); err != nil {
		t.Fatalf("Heartbeat via a follower: %v", err)
	}
	if getNode(t, via1, n2.id()).LastHeartbeatUnixNanos == 0 {
		t.Errorf("leader did not record the heartbeat of %s forwarded by %s", n2.id(), n1.id())
	}
	st := &api.NodeStatus{ExternalAddress: "127.0.0.1", Version: "via-follower", RunningCurator: &api.NodeStatus_RunningCurator{Port: int32(n2.addr.Port())}}
	if _, err := n2.client(t, n1.addr.String()).UpdateNodeStatus(ctx, &api.UpdateNodeStatusRequest{NodeId: n2.id(), Status: st}); err != nil {
		t.Errorf("UpdateNodeStatus of itself via a follower: %v", err)
	}
	if _, err := n2.client(t, n1.addr.String()).UpdateNodeStatus(ctx, &api.UpdateNodeStatusRequest{NodeId: n1.id(), Status: st}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("UpdateNodeStatus of the follower itself via that follower = %v, want PermissionDenied", err)
	}
	// Watch through a follower.
	w, err := n2.client(t, n1.addr.String()).Watch(ctx, &api.WatchRequest{Kind: &api.WatchRequest_NodesInCluster_{NodesInCluster: &api.WatchRequest_NodesInCluster{}}})
	if err != nil {
		t.Fatalf("Watch via a follower: %v", err)
	}
	if ev := recvEvent(t, w); len(ev.Nodes) != 3 || ev.Progress != api.WatchEvent_PROGRESS_LAST_BACKLOGGED {
		t.Errorf("Watch via a follower: backlog = %v, want 3 nodes", ev)
	}

	// A node that is not a consensus member cannot pose as the owner.
	plain := newTestNode(t)
	c.enrol(t, addr0, plain)
	ownerPeer := identity.Peer{Kind: identity.PeerOwner, PublicKey: c.ownerKey.Public().(ed25519.PublicKey)}
	pm := api.NewManagementClient(dial(t, addr0, rpc.NodeCredentials(plain.ident)))
	if _, err := pm.GetNodes(rpc.WithForwardedPeer(ctx, ownerPeer), &api.GetNodesRequest{}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("GetNodes by a plain node posing as the owner = %v, want PermissionDenied", err)
	}

	// Kill the leader's curator: another takes over, and serves.
	start := time.Now()
	n0.stopCurator()
	next := waitLeader(t, n1, n1.addr.String(), n0.id())
	t.Logf("new leader %s after %v", next, time.Since(start))
	fixture.Eventually(t, time.Minute, "GetNodes via the new curators", func() error {
		for _, n := range []*testNode{n1, n2} {
			if _, err := c.mgmt(t, n.addr.String()).GetNodes(ctx, &api.GetNodesRequest{}); err != nil {
				return fmt.Errorf("via %s: %w", n.id(), err)
			}
		}
		return nil
	})
	n0.startCurator(t, ports.option())
	if got := waitLeader(t, n0, addr0, ""); got != next {
		t.Errorf("restarted curator follows %s, want %s", got, next)
	}

	// Shrink etcd: remove n2's membership through a follower.
	no := false
	if _, err := c.mgmt(t, addr0).UpdateNodeRoles(ctx, &api.UpdateNodeRolesRequest{NodeId: n2.id(), ConsensusMember: &no}); err != nil {
		t.Fatalf("UpdateNodeRoles(%s, not a consensus member): %v", n2.id(), err)
	}
	fixture.Eventually(t, time.Minute, "waiting for the member list to shrink", func() error {
		cl := n0.member.WaitVoter(t).Client()
		resp, err := cl.Get(ctx, consensus.PeerPKINamespace.CertificateKey("etcd-peer-"+n2.id()))
		if err != nil {
			return err
		}
		if len(resp.Kvs) != 0 {
			return fmt.Errorf("peer certificate of %s still there", n2.id())
		}
		return nil
	})
	// Its node certificate is still valid and honoured, but a former
	// consensus member may forward no more: posing as the owner or as
	// another node through the forwarded-peer header is refused.
	former := dial(t, addr0, rpc.NodeCredentials(n2.ident))
	if _, err := api.NewManagementClient(former).GetNodes(rpc.WithForwardedPeer(ctx, ownerPeer), &api.GetNodesRequest{}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("GetNodes by a former consensus member forwarding as the owner = %v, want PermissionDenied", err)
	}
	n1Peer := identity.Peer{Kind: identity.PeerNode, NodeID: n1.id(), PublicKey: n1.pub()}
	if _, err := api.NewCuratorClient(former).Heartbeat(rpc.WithForwardedPeer(ctx, n1Peer), &api.HeartbeatRequest{}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("Heartbeat by a former consensus member forwarding as %s = %v, want PermissionDenied", n1.id(), err)
	}
	if _, err := api.NewCuratorClient(former).Heartbeat(ctx, &api.HeartbeatRequest{}); err != nil {
		t.Errorf("Heartbeat of the former consensus member as itself: %v", err)
	}

	// The leader gives up its own node's membership: the answer must
	// reach the caller although the leader's etcd stops right after.
	byID := map[string]*testNode{n0.id(): n0, n1.id(): n1}
	lead := byID[waitLeader(t, n0, addr0, n2.id())]
	if lead == nil {
		t.Fatalf("the leader is neither %s nor %s", n0.id(), n1.id())
	}
	if _, err := c.mgmt(t, lead.addr.String()).UpdateNodeRoles(ctx, &api.UpdateNodeRolesRequest{NodeId: lead.id(), ConsensusMember: &no}); err != nil {
		t.Fatalf("UpdateNodeRoles(%s, not a consensus member) through %s itself: %v", lead.id(), lead.id(), err)
	}
	other := n0
	if lead == n0 {
		other = n1
	}
	// Its etcd stopped as it removed itself, so it could not revoke its
	// own peer certificate: the same call answered by the remaining
	// curator finishes that.
	fixture.Eventually(t, time.Minute, "waiting for the leader's own membership to go", func() error {
		if _, err := c.mgmt(t, other.addr.String()).UpdateNodeRoles(ctx, &api.UpdateNodeRolesRequest{NodeId: lead.id(), ConsensusMember: &no}); err != nil {
			return fmt.Errorf("UpdateNodeRoles(%s) again through %s: %w", lead.id(), other.id(), err)
		}
		cl := other.member.WaitVoter(t).Client()
		resp, err := cl.Get(ctx, consensus.PeerPKINamespace.CertificateKey("etcd-peer-"+lead.id()))
		if err != nil {
			return err
		}
		if len(resp.Kvs) != 0 {
			return fmt.Errorf("peer certificate of %s still there", lead.id())
		}
		return nil
	})
}

// TestStaleCandidacy leaves a candidacy of the node in the election, on a
// lease that outlives the test, as a crashed curator would, and checks that
// the restarted curator clears it and leads.
func TestStaleCandidacy(t *testing.T) {
	c := newTestCluster(t)
	ctx := fixture.Context(t)
	n := c.nodes[0]
	addr := n.addr.String()
	waitLeader(t, n, addr, "")
	n.stopCurator()

	cl, err := n.member.WaitVoter(t).Client().Sub(namespace)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	lease, err := cl.Grant(ctx, 3600)
	if err != nil {
		t.Fatalf("Grant: %v", err)
	}
	key := fmt.Sprintf("%s/%x", electionName, lease.ID)
	if _, err := cl.Put(ctx, key, electionValue(n.id(), n.addr), clientv3.WithLease(lease.ID)); err != nil {
		t.Fatalf("Put(%s): %v", key, err)
	}

	n.startCurator(t)
	fixture.Eventually(t, 30*time.Second, "GetNodes after the restart", func() error {
		_, err := c.mgmt(t, addr).GetNodes(ctx, &api.GetNodesRequest{})
		return err
	})
	resp, err := cl.Get(ctx, key)
	if err != nil || len(resp.Kvs) != 0 {
		t.Errorf("stale candidacy %s = %v, %v, want it deleted", key, resp, err)
	}
}

// TestElectionTTL checks that the curator's candidacy holds a lease of the
// TTL it was given, rounded up to whole seconds, and that a TTL below
// etcd's floor is raised to two seconds.
func TestElectionTTL(t *testing.T) {
	for _, tc := range []struct {
		ttl  time.Duration
		want int64
	}{
		{2500 * time.Millisecond, 3},
		{time.Second, 2},
	} {
		t.Run(tc.ttl.String(), func(t *testing.T) {
			c := newTestCluster(t, WithElectionTTL(tc.ttl))
			ctx := fixture.Context(t)
			n := c.nodes[0]
			waitLeader(t, n, n.addr.String(), "")
			cl, err := n.member.WaitVoter(t).Client().Sub(namespace)
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			resp, err := cl.Get(ctx, electionName+"/", clientv3.WithPrefix())
			if err != nil || len(resp.Kvs) != 1 {
				t.Fatalf("candidacies = %v, %v, want one", resp, err)
			}
			ttl, err := cl.TimeToLive(ctx, clientv3.LeaseID(resp.Kvs[0].Lease))
			if err != nil {
				t.Fatalf("TimeToLive: %v", err)
			}
			if ttl.GrantedTTL != tc.want {
				t.Errorf("the candidacy's lease was granted %d s, want %d s", ttl.GrantedTTL, tc.want)
			}
		})
	}
}
