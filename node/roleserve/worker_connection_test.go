package roleserve

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/node/identity/identitytest"
	"cairn.dev/cairn/node/rpc"
	"cairn.dev/cairn/pkg/event"
	"cairn.dev/cairn/pkg/event/memory"
	"cairn.dev/cairn/pkg/fixture"
	api "cairn.dev/cairn/proto/api"
)

// leadingCurator says that it leads, at addr. streams counts the
// GetCurrentLeader streams open.
type leadingCurator struct {
	api.UnimplementedCuratorServer
	node    *identity.Node
	addr    netip.AddrPort
	streams atomic.Int32
}

func (c *leadingCurator) GetCurrentLeader(_ *api.GetCurrentLeaderRequest, srv api.Curator_GetCurrentLeaderServer) error {
	c.streams.Add(1)
	defer c.streams.Add(-1)
	if err := srv.Send(&api.GetCurrentLeaderResponse{
		LeaderNodeId: c.node.ID(),
		LeaderHost:   c.addr.Addr().String(),
		LeaderPort:   int32(c.addr.Port()),
	}); err != nil {
		return err
	}
	<-srv.Context().Done()
	return srv.Context().Err()
}

// connectionTest is a connection worker run against one leading curator,
// which it does not know at first: its cluster directory is empty and it
// knows no local curator.
type connectionTest struct {
	leader         *leadingCurator
	curators       memory.Value[[]string]
	decommissioned memory.Value[bool]
	conn           memory.Value[*curatorConn]
}

func runConnection(t *testing.T) *connectionTest {
	t.Helper()
	ca := identitytest.NewCA(t, "test CA")
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &connectionTest{leader: &leadingCurator{node: ca.Node(t), addr: lis.Addr().(*net.TCPAddr).AddrPort()}}
	srv := rpc.NewServer(c.leader.node)
	api.RegisterCuratorServer(srv, c.leader)
	runWorker(t, func(ctx context.Context) error { return srv.Serve(ctx, lis) })

	var (
		membership   memory.Value[*Membership]
		credentials  memory.Value[*identity.Node]
		localCurator memory.Value[netip.AddrPort]
	)
	node := ca.Node(t)
	membership.Set(&Membership{NodeKey: node.PrivateKey()})
	credentials.Set(node)
	localCurator.Set(netip.AddrPort{})
	c.decommissioned.Set(false)
	runWorker(t, (&workerConnection{
		membership:     &membership,
		credentials:    &credentials,
		localCurator:   &localCurator,
		curators:       &c.curators,
		decommissioned: &c.decommissioned,
		curator:        &c.conn,
	}).run)
	return c
}

// followsLeader publishes the leader as the cluster's curator and waits
// for the connection's resolver to find it.
func (c *connectionTest) followsLeader(t *testing.T) {
	t.Helper()
	cc, err := waitFor(fixture.Context(t), &c.conn, "the connection")
	if err != nil {
		t.Fatal(err)
	}
	c.curators.Set([]string{c.leader.addr.String()})
	fixture.Eventually(t, 30*time.Second, "the leader", func() error {
		if got, want := cc.resolver.Leader(), c.leader.addr.String(); got != want {
			return fmt.Errorf("leader %q, want %q", got, want)
		}
		return nil
	})
}

// TestConnectionFollowsCurators checks that the connection's resolver
// finds the leader among the curators published to it.
func TestConnectionFollowsCurators(t *testing.T) {
	runConnection(t).followsLeader(t)
}

// TestConnectionClosesWhenDecommissioned: once the node is said
// decommissioned, the connection is unset and its resolver stops asking
// the curator who leads.
func TestConnectionClosesWhenDecommissioned(t *testing.T) {
	c := runConnection(t)
	c.followsLeader(t)
	if n := c.leader.streams.Load(); n == 0 {
		t.Fatalf("no GetCurrentLeader stream open while the connection follows the leader")
	}
	c.decommissioned.Set(true)
	ctx, cancel := context.WithTimeout(fixture.Context(t), 30*time.Second)
	defer cancel()
	if _, err := event.Get(ctx, &c.conn, event.Filter(func(cc *curatorConn) bool { return cc == nil })); err != nil {
		t.Fatalf("waiting for the connection to be unset: %v", err)
	}
	fixture.Eventually(t, 30*time.Second, "the resolver's streams to end", func() error {
		if n := c.leader.streams.Load(); n != 0 {
			return fmt.Errorf("%d GetCurrentLeader streams open", n)
		}
		return nil
	})
	// Nothing dials again.
	time.Sleep(2 * time.Second)
	if n := c.leader.streams.Load(); n != 0 {
		t.Errorf("%d GetCurrentLeader streams open again after the node was decommissioned", n)
	}
	if cc := current(t, &c.conn); cc != nil {
		t.Errorf("a connection was published again after the node was decommissioned")
	}
}
