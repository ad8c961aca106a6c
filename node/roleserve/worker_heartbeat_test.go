package roleserve

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"cairn.dev/cairn/node/rpc"
	"cairn.dev/cairn/pkg/event/memory"
	"cairn.dev/cairn/pkg/fixture"
	"cairn.dev/cairn/pkg/supervisor"
	api "cairn.dev/cairn/proto/api"
)

// silentLeader is a curator whose first heartbeat never answers, as a
// leader's whose machine died, and whose later ones answer with an
// interval of two seconds. It records the time each call had left.
type silentLeader struct {
	api.UnimplementedCuratorServer
	mu    sync.Mutex
	left  []time.Duration
	calls chan struct{}
}

func (s *silentLeader) Heartbeat(ctx context.Context, _ *api.HeartbeatRequest) (*api.HeartbeatResponse, error) {
	deadline, ok := ctx.Deadline()
	s.mu.Lock()
	n := len(s.left)
	if ok {
		s.left = append(s.left, time.Until(deadline))
	} else {
		s.left = append(s.left, 0)
	}
	s.mu.Unlock()
	s.calls <- struct{}{}
	if n == 0 {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return &api.HeartbeatResponse{IntervalMillis: 2000}, nil
}

// TestHeartbeatGivesUpOnASilentLeader checks that a heartbeat waits at
// most half the interval (at least a second), and that the worker beats
// again after one went unanswered.
func TestHeartbeatGivesUpOnASilentLeader(t *testing.T) {
	leader := &silentLeader{calls: make(chan struct{}, 16)}
	var cc memory.Value[*curatorConn]
	cc.Set(fakeCurator(t, leader))
	w := &workerHeartbeat{curator: &cc}

	ctx, cancel := context.WithCancel(fixture.Context(t))
	sup := supervisor.New(ctx, w.run)
	defer sup.Wait()
	defer cancel()
	for i := range 3 {
		select {
		case <-leader.calls:
		case <-time.After(time.Minute):
			t.Fatalf("heartbeat %d never came", i+1)
		}
	}
	leader.mu.Lock()
	defer leader.mu.Unlock()
	// The first beat, before any answer, has the default interval's
	// half; the one after the unanswered beat too (the worker started
	// again); the next, after an answer of two seconds, one second.
	for i, max := range []time.Duration{defaultHeartbeatInterval / 2, defaultHeartbeatInterval / 2, time.Second} {
		if left := leader.left[i]; left <= 0 || left > max {
			t.Errorf("heartbeat %d had %v left, want at most %v", i+1, left, max)
		}
	}
}

// failingLeader refuses the first failures heartbeats, as a leader cut
// off by a partition does, then answers them.
type failingLeader struct {
	api.UnimplementedCuratorServer
	mu       sync.Mutex
	failures int
	calls    chan time.Time
}

func (f *failingLeader) Heartbeat(context.Context, *api.HeartbeatRequest) (*api.HeartbeatResponse, error) {
	f.calls <- time.Now()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failures > 0 {
		f.failures--
		return nil, status.Error(codes.Unavailable, "cut off")
	}
	return &api.HeartbeatResponse{IntervalMillis: 2000}, nil
}

// TestHeartbeatKeepsBeatingThroughFailures fails five heartbeats in a row:
// the worker keeps beating, at its steady retry pace, without dying (a
// death would make its supervisor wait longer after each one, and so
// hear the node again long after the leader was back).
func TestHeartbeatKeepsBeatingThroughFailures(t *testing.T) {
	leader := &failingLeader{failures: 5, calls: make(chan time.Time, 16)}
	var cc memory.Value[*curatorConn]
	cc.Set(fakeCurator(t, leader))
	w := &workerHeartbeat{curator: &cc}

	var mu sync.Mutex
	restarts := 0
	ctx, cancel := context.WithCancel(fixture.Context(t))
	sup := supervisor.New(ctx, w.run, supervisor.WithRestartHook(func(string) {
		mu.Lock()
		restarts++
		mu.Unlock()
	}))
	defer sup.Wait()
	defer cancel()
	var at []time.Time
	for i := range 7 {
		select {
		case c := <-leader.calls:
			at = append(at, c)
		case <-time.After(time.Minute):
			t.Fatalf("heartbeat %d never came", i+1)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if restarts != 0 {
		t.Errorf("the heartbeat worker was restarted %d times while beats failed, want it to keep beating", restarts)
	}
	for i := 1; i < 6; i++ {
		if gap := at[i].Sub(at[i-1]); gap < 500*time.Millisecond {
			t.Errorf("beat %d came %v after a failed one, want about a second: retrying hot", i+1, gap)
		}
	}
	t.Logf("beats after failures came %v apart", at[5].Sub(at[4]))
}

// decommissionedLeader refuses every heartbeat as a curator refuses a
// decommissioned node.
type decommissionedLeader struct {
	api.UnimplementedCuratorServer
	calls atomic.Int32
}

func (d *decommissionedLeader) Heartbeat(context.Context, *api.HeartbeatRequest) (*api.HeartbeatResponse, error) {
	d.calls.Add(1)
	return nil, rpc.Decommissioned(codes.PermissionDenied, "node n is NODE_STATE_DECOMMISSIONED; its certificate is no longer honoured")
}

// TestHeartbeatStopsWhenDecommissioned: a refusal that says the node was
// decommissioned ends the beats; the worker neither retries every second
// nor dies to be restarted.
func TestHeartbeatStopsWhenDecommissioned(t *testing.T) {
	leader := &decommissionedLeader{}
	var cc memory.Value[*curatorConn]
	cc.Set(fakeCurator(t, leader))
	w := &workerHeartbeat{curator: &cc}
	runWorker(t, w.run)
	fixture.Eventually(t, time.Minute, "the first heartbeat", func() error {
		if leader.calls.Load() == 0 {
			return fmt.Errorf("no heartbeat yet")
		}
		return nil
	})
	time.Sleep(3 * time.Second)
	if n := leader.calls.Load(); n != 1 {
		t.Errorf("%d heartbeats after the refusal of a decommissioned node, want 1", n)
	}
}

// quickLeader answers every heartbeat, asking for the next in 200 ms.
type quickLeader struct {
	api.UnimplementedCuratorServer
}

func (quickLeader) Heartbeat(context.Context, *api.HeartbeatRequest) (*api.HeartbeatResponse, error) {
	return &api.HeartbeatResponse{IntervalMillis: 200}, nil
}

// TestHeartbeatWaitsWhileNoConnection: once the connection worker unsets
// the connection and closes it (as when the node was decommissioned), the
// worker makes no more calls on the closed one; it beats again on the
// next connection.
func TestHeartbeatWaitsWhileNoConnection(t *testing.T) {
	first := fakeCurator(t, quickLeader{})
	var attempts atomic.Int32
	counting := grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		attempts.Add(1)
		return invoker(ctx, method, req, reply, cc, opts...)
	})
	conn, err := grpc.NewClient(first.conn.Target(), grpc.WithTransportCredentials(insecure.NewCredentials()), counting)
	if err != nil {
		t.Fatal(err)
	}
	var cc memory.Value[*curatorConn]
	cc.Set(&curatorConn{conn: conn})
	runWorker(t, (&workerHeartbeat{curator: &cc}).run)
	beats := func(atLeast int32) {
		t.Helper()
		fixture.Eventually(t, time.Minute, "heartbeats", func() error {
			if n := attempts.Load(); n < atLeast {
				return fmt.Errorf("%d heartbeats so far", n)
			}
			return nil
		})
	}
	beats(3)
	// As the connection worker does: unset, then close.
	cc.Set(nil)
	conn.Close()
	time.Sleep(200 * time.Millisecond)
	before := attempts.Load()
	time.Sleep(2500 * time.Millisecond)
	if n := attempts.Load() - before; n != 0 {
		t.Errorf("%d heartbeats tried on the closed connection, want none", n)
	}
	// A new connection brings the beats back.
	next, err := grpc.NewClient(first.conn.Target(), grpc.WithTransportCredentials(insecure.NewCredentials()), counting)
	if err != nil {
		t.Fatal(err)
	}
	defer next.Close()
	cc.Set(&curatorConn{conn: next})
	beats(attempts.Load() + 3)
}
