package main

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"cairn.dev/cairn/node/timesync"
	"cairn.dev/cairn/pkg/event"
	"cairn.dev/cairn/pkg/supervisor"
)

// timesyncRunnable is the timesync child: the service that keeps the
// clock with the NTP servers of the network, publishing the clock's state
// on state, and a watcher that puts every change of that state on the
// consoles.
func timesyncRunnable(servers event.Watchable[[]netip.Addr], state event.Value[timesync.State], printf func(string, ...any)) supervisor.Runnable {
	return func(ctx context.Context) error {
		svc := timesync.New(timesync.Config{Servers: servers, State: state})
		if err := supervisor.Run(ctx, "service", svc.Run); err != nil {
			return fmt.Errorf("when starting the timesync service: %w", err)
		}
		if err := supervisor.Run(ctx, "state", watchClock(state, printf)); err != nil {
			return fmt.Errorf("when starting the clock watcher: %w", err)
		}
		supervisor.Signal(ctx, supervisor.SignalHealthy)
		<-ctx.Done()
		return ctx.Err()
	}
}

// watchClock prints a phase line when the clock's state, or the server it
// is synchronized with, changes.
func watchClock(state event.Watchable[timesync.State], printf func(string, ...any)) supervisor.Runnable {
	return func(ctx context.Context) error {
		w := state.Watch()
		defer w.Close()
		supervisor.Signal(ctx, supervisor.SignalHealthy)
		var last timesync.State
		for first := true; ; first = false {
			st, err := w.Get(ctx)
			if err != nil {
				return err
			}
			if !first && st.Sync == last.Sync && st.Server == last.Server && st.Reason == last.Reason {
				continue
			}
			last = st
			switch st.Sync {
			case timesync.Synchronized:
				printf("clock synchronized with %s (offset %s)", st.Server, st.Offset.Round(time.Microsecond))
			case timesync.KnownWrong:
				printf("clock known wrong: %s", st.Reason)
			default:
				printf("clock %s", st.Sync)
			}
		}
	}
}
