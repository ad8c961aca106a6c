package roleserve

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/node/identity/identitytest"
	"cairn.dev/cairn/node/rpc"
	"cairn.dev/cairn/pkg/event/memory"
	"cairn.dev/cairn/pkg/fixture"
	api "cairn.dev/cairn/proto/api"
)

// leadingCurator says that it leads, at addr.
type leadingCurator struct {
	api.UnimplementedCuratorServer
	node *identity.Node
	addr netip.AddrPort
}

func (c *leadingCurator) GetCurrentLeader(_ *api.GetCurrentLeaderRequest, srv api.Curator_GetCurrentLeaderServer) error {
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

// TestConnectionFollowsCurators checks that the connection's resolver,
// which starts from an empty cluster directory and knows no local curator,
// finds the leader among the curators published to it.
func TestConnectionFollowsCurators(t *testing.T) {
	ctx := fixture.Context(t)
	ca := identitytest.NewCA(t, "test CA")
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	leader := &leadingCurator{node: ca.Node(t), addr: lis.Addr().(*net.TCPAddr).AddrPort()}
	srv := rpc.NewServer(leader.node)
	api.RegisterCuratorServer(srv, leader)
	runWorker(t, func(ctx context.Context) error { return srv.Serve(ctx, lis) })

	var (
		membership   memory.Value[*Membership]
		credentials  memory.Value[*identity.Node]
		localCurator memory.Value[netip.AddrPort]
		curators     memory.Value[[]string]
		conn         memory.Value[*curatorConn]
	)
	node := ca.Node(t)
	membership.Set(&Membership{NodeKey: node.PrivateKey()})
	credentials.Set(node)
	localCurator.Set(netip.AddrPort{})
	runWorker(t, (&workerConnection{
		membership:   &membership,
		credentials:  &credentials,
		localCurator: &localCurator,
		curators:     &curators,
		curator:      &conn,
	}).run)
	cc, err := waitFor(ctx, &conn, "the connection")
	if err != nil {
		t.Fatal(err)
	}
	curators.Set([]string{leader.addr.String()})
	fixture.Eventually(t, 30*time.Second, "the leader", func() error {
		if got, want := cc.resolver.Leader(), leader.addr.String(); got != want {
			return fmt.Errorf("leader %q, want %q", got, want)
		}
		return nil
	})
}
