package roleserve

import (
	"context"
	"fmt"
	"time"

	"cairn.dev/cairn/pkg/event"
	"cairn.dev/cairn/pkg/supervisor"
	api "cairn.dev/cairn/proto/api"
)

// defaultHeartbeatInterval is used when the curator names none.
const defaultHeartbeatInterval = 5 * time.Second

// beatTimeout bounds one heartbeat: half the interval, at least a second.
// A beat sent to a leader whose machine just died waits on a connection
// that stays silent rather than closing; failing it early lets the next
// beat reach the new leader within the grace that leader gives nodes it
// has not heard from yet (a heartbeat interval and a quarter), so that a
// live node is not reported HEARTBEAT_TIMEOUT after a failover.
func beatTimeout(interval time.Duration) time.Duration {
	return max(interval/2, time.Second)
}

// workerHeartbeat tells the curator leader that this node is alive, at
// the interval its answers name.
type workerHeartbeat struct {
	curator event.Watchable[*curatorConn]
}

func (w *workerHeartbeat) run(ctx context.Context) error {
	cc, err := waitFor(ctx, w.curator, "a curator connection")
	if err != nil {
		return err
	}
	healthy := false
	interval := defaultHeartbeatInterval
	for {
		timeout := beatTimeout(interval)
		cctx, cancel := context.WithTimeout(ctx, timeout)
		res, err := cc.client().Heartbeat(cctx, &api.HeartbeatRequest{})
		cancel()
		if err != nil {
			return fmt.Errorf("when sending heartbeat (waited at most %v): %w", timeout, err)
		}
		if !healthy {
			supervisor.Signal(ctx, supervisor.SignalHealthy)
			healthy = true
		}
		interval = time.Duration(res.GetIntervalMillis()) * time.Millisecond
		if interval <= 0 {
			interval = defaultHeartbeatInterval
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(interval):
		}
	}
}
