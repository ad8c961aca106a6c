package roleserve

import (
	"context"
	"fmt"
	"time"

	"cairn.dev/cairn/node/rpc"
	"cairn.dev/cairn/pkg/event"
	"cairn.dev/cairn/pkg/sleep"
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

// beatRetry is how soon a node tries again after a heartbeat failed. A
// beat fails while the node is cut off from the leader (a partition, a
// failover); the worker keeps beating at this steady pace instead of
// dying, so that the node is heard again within about a second of the
// leader being reachable, not after the supervisor's restart delay, which
// grows with every failure of a partition.
const beatRetry = time.Second

// beatReport is how many failed beats in a row pass between two reports
// of the failure in the log, after the first.
const beatReport = 30

// workerHeartbeat tells the curator leader that this node is alive, at
// the interval its answers name. It does not die when a beat fails: it
// says so, and tries again after beatRetry, on the newest curator
// connection; while there is none, it waits for one.
type workerHeartbeat struct {
	curator event.Watchable[*curatorConn]
}

func (w *workerHeartbeat) run(ctx context.Context) error {
	cw := w.curator.Watch()
	defer cw.Close()
	cc, err := cw.Get(ctx, event.NotNil[*curatorConn]())
	if err != nil {
		return fmt.Errorf("when waiting for a curator connection: %w", err)
	}
	healthy := false
	interval := defaultHeartbeatInterval
	for failures := 0; ; {
		if next, err := cw.Get(ctx, event.BacklogOnly[*curatorConn]()); err == nil {
			cc = next
		}
		if cc == nil {
			// The connection closed (its worker restarts, or the node
			// was decommissioned): a beat on it would fail at once,
			// every beatRetry. Wait for the next one.
			if cc, err = cw.Get(ctx, event.NotNil[*curatorConn]()); err != nil {
				return fmt.Errorf("when waiting for a curator connection: %w", err)
			}
		}
		timeout := beatTimeout(interval)
		cctx, cancel := context.WithTimeout(ctx, timeout)
		res, err := cc.client().Heartbeat(cctx, &api.HeartbeatRequest{})
		cancel()
		wait := interval
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case rpc.IsDecommissioned(err):
			// No beat will ever be taken again (rolefetch gives up the
			// roles on the same refusal).
			supervisor.Logger(ctx).Warningf("Heartbeats stop: %v", err)
			supervisor.Signal(ctx, supervisor.SignalHealthy)
			<-ctx.Done()
			return ctx.Err()
		case err != nil:
			if failures%beatReport == 0 {
				supervisor.Logger(ctx).Warningf("Heartbeat failed (waited at most %v; %d in a row, trying every %v): %v", timeout, failures+1, beatRetry, err)
			}
			failures++
			wait = beatRetry
		default:
			if failures > 0 {
				supervisor.Logger(ctx).Infof("Heartbeats answered again after %d failed", failures)
				failures = 0
			}
			if !healthy {
				supervisor.Signal(ctx, supervisor.SignalHealthy)
				healthy = true
			}
			interval = time.Duration(res.GetIntervalMillis()) * time.Millisecond
			if interval <= 0 {
				interval = defaultHeartbeatInterval
			}
			wait = interval
		}
		if err := sleep.For(ctx, wait); err != nil {
			return err
		}
	}
}
