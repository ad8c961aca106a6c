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
	for {
		cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		res, err := cc.client().Heartbeat(cctx, &api.HeartbeatRequest{})
		cancel()
		if err != nil {
			return fmt.Errorf("when sending heartbeat: %w", err)
		}
		if !healthy {
			supervisor.Signal(ctx, supervisor.SignalHealthy)
			healthy = true
		}
		interval := time.Duration(res.GetIntervalMillis()) * time.Millisecond
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
