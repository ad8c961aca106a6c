package roleserve

import (
	"context"
	"sync"
	"testing"
	"time"

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
