package resolver

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync/atomic"
	"testing"

	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/node/identity/identitytest"
	"cairn.dev/cairn/node/rpc"
	"cairn.dev/cairn/pkg/event"
	"cairn.dev/cairn/pkg/event/memory"
	"cairn.dev/cairn/pkg/supervisor"
	api "cairn.dev/cairn/proto/api"
)

// fakeCurator answers GetCurrentLeader from a leadership shared by all
// fake curators of a test, and Heartbeat with its own index as the
// interval, so that a test sees which curator answered.
type fakeCurator struct {
	api.UnimplementedCuratorServer
	index  int
	node   *identity.Node
	leader *memory.Value[int] // index of the leader, -1: none
	all    []*fakeCurator
	addr   string
	// blind curators name no leader, like one whose node was cut off.
	blind bool
	// streams counts the GetCurrentLeader streams opened.
	streams atomic.Int32
}

func (f *fakeCurator) GetCurrentLeader(_ *api.GetCurrentLeaderRequest, srv api.Curator_GetCurrentLeaderServer) error {
	f.streams.Add(1)
	w := f.leader.Watch()
	defer w.Close()
	for {
		i, err := w.Get(srv.Context())
		if err != nil {
			return err
		}
		msg := &api.GetCurrentLeaderResponse{}
		if i >= 0 && !f.blind {
			l := f.all[i]
			host, port, _ := net.SplitHostPort(l.addr)
			p, _ := strconv.Atoi(port)
			msg = &api.GetCurrentLeaderResponse{LeaderNodeId: l.node.ID(), LeaderHost: host, LeaderPort: int32(p)}
		}
		if err := srv.Send(msg); err != nil {
			return err
		}
	}
}

func (f *fakeCurator) Heartbeat(context.Context, *api.HeartbeatRequest) (*api.HeartbeatResponse, error) {
	return &api.HeartbeatResponse{IntervalMillis: int64(f.index)}, nil
}

// fakeCluster is n fake curators, each on a loopback port of its own,
// served by a runnable that the test can stop and start.
type fakeCluster struct {
	curators []*fakeCurator
	leader   memory.Value[int]
	// up[i] says whether curator i should serve.
	up []*memory.Value[bool]
}

func newFakeCluster(t testing.TB, ca *identitytest.CA, n int) *fakeCluster {
	t.Helper()
	c := &fakeCluster{}
	for i := range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		f := &fakeCurator{index: i, node: ca.Node(t), leader: &c.leader, addr: addr}
		c.curators = append(c.curators, f)
		up := &memory.Value[bool]{}
		up.Set(true)
		c.up = append(c.up, up)
	}
	for _, f := range c.curators {
		f.all = c.curators
	}
	return c
}

// run serves every curator while its up value is true.
func (c *fakeCluster) run(ctx context.Context) error {
	for i, f := range c.curators {
		if err := supervisor.Run(ctx, fmt.Sprintf("curator%d", i), c.serve(f, c.up[i])); err != nil {
			return err
		}
	}
	supervisor.Signal(ctx, supervisor.SignalHealthy)
	<-ctx.Done()
	return ctx.Err()
}

func (c *fakeCluster) serve(f *fakeCurator, up *memory.Value[bool]) supervisor.Runnable {
	return func(ctx context.Context) error {
		w := up.Watch()
		defer w.Close()
		if _, err := w.Get(ctx, event.Filter(func(b bool) bool { return b })); err != nil {
			return err
		}
		lis, err := net.Listen("tcp", f.addr)
		if err != nil {
			return err
		}
		srv := rpc.NewServer(f.node)
		api.RegisterCuratorServer(srv, f)
		sctx, cancel := context.WithCancel(ctx)
		defer cancel()
		supervisor.Signal(ctx, supervisor.SignalHealthy)
		if err := supervisor.Run(ctx, "down", func(ctx context.Context) error {
			supervisor.Signal(ctx, supervisor.SignalHealthy)
			_, err := w.Get(ctx, event.Filter(func(b bool) bool { return !b }))
			cancel()
			return err
		}); err != nil {
			return err
		}
		if err := srv.Serve(sctx, lis); err != nil {
			return err
		}
		return fmt.Errorf("stopped serving")
	}
}

func (c *fakeCluster) addrs() []string {
	var a []string
	for _, f := range c.curators {
		a = append(a, f.addr)
	}
	return a
}
