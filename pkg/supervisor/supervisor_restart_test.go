package supervisor

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"cairn.dev/cairn/pkg/fixture"
	"cairn.dev/cairn/pkg/logtree"
)

// TestRestartOnPurpose checks that a runnable ending with ErrRestart is
// started again like any dead runnable, but logged as an intended restart
// (INFO) rather than as a death (ERROR).
func TestRestartOnPurpose(t *testing.T) {
	var starts atomic.Int32
	worker := func(ctx context.Context) error {
		Signal(ctx, SignalHealthy)
		if starts.Add(1) == 1 {
			return fmt.Errorf("input changed: %w", ErrRestart)
		}
		<-ctx.Done()
		return ctx.Err()
	}
	s, _ := startTree(t, func(ctx context.Context) error {
		if err := Run(ctx, "worker", worker); err != nil {
			return err
		}
		Signal(ctx, SignalHealthy)
		<-ctx.Done()
		return ctx.Err()
	})
	e := waitLog(t, s.LogTree(), "root.worker", "restarting on purpose: input changed")
	if e.Severity != logtree.INFO {
		t.Errorf("intended restart logged as %v, want INFO", e.Severity)
	}
	fixture.Eventually(t, waitTimeout, "worker restarted", func() error {
		if n := starts.Load(); n < 2 {
			return fmt.Errorf("worker started %d times, want 2", n)
		}
		return nil
	})
	if es := logMessages(t, s.LogTree(), "root.worker", "died:"); len(es) != 0 {
		t.Errorf("intended restart logged as a death: %q", es[0].Message)
	}
}

// TestRestartHook checks that the restart hook hears of each restart of a
// dying runnable, by its DN, and of nothing else.
func TestRestartHook(t *testing.T) {
	var starts atomic.Int32
	heard := make(chan string, 10)
	worker := func(ctx context.Context) error {
		if starts.Add(1) <= 2 {
			return fmt.Errorf("failing on start %d", starts.Load())
		}
		Signal(ctx, SignalHealthy)
		<-ctx.Done()
		return ctx.Err()
	}
	startTree(t, func(ctx context.Context) error {
		if err := Run(ctx, "worker", worker); err != nil {
			return err
		}
		Signal(ctx, SignalHealthy)
		<-ctx.Done()
		return ctx.Err()
	}, WithRestartHook(func(dn string) { heard <- dn }))
	fixture.Eventually(t, waitTimeout, "worker running", func() error {
		if n := starts.Load(); n < 3 {
			return fmt.Errorf("worker started %d times, want 3", n)
		}
		return nil
	})
	for range 2 {
		if dn := <-heard; dn != "root.worker" {
			t.Errorf("hook heard of %q, want root.worker", dn)
		}
	}
	select {
	case dn := <-heard:
		t.Errorf("hook heard of a third restart, of %q", dn)
	default:
	}
}
