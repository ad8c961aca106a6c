package supervisor

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"cairn.dev/cairn/pkg/fixture"
)

// TestBackoff measures restarts of a runnable that keeps failing: the
// delays grow, and fall back to the initial delay once it was healthy. The
// delays are read from the supervisor's log; the measured gaps between
// starts must be at least those delays.
func TestBackoff(t *testing.T) {
	const (
		initial   = 10 * time.Millisecond
		failFirst = 5 // instances that fail before becoming healthy
	)
	var starts []time.Time
	healthyAt := -1
	stable := make(chan struct{}) // closed by the first instance that stays
	flaky := func(ctx context.Context) error {
		starts = append(starts, time.Now()) // one instance at a time
		n := len(starts)
		switch {
		case n <= failFirst:
			return errors.New("not yet")
		case n == failFirst+1:
			healthyAt = n
			Signal(ctx, SignalHealthy)
			return errors.New("failed while healthy")
		}
		Signal(ctx, SignalHealthy)
		if n == failFirst+2 {
			close(stable)
		}
		<-ctx.Done()
		return ctx.Err()
	}
	root := func(ctx context.Context) error {
		if err := Run(ctx, "flaky", flaky); err != nil {
			return err
		}
		Signal(ctx, SignalHealthy)
		<-ctx.Done()
		return ctx.Err()
	}
	s, cancel := startTree(t, root, WithBackoff(initial, time.Minute))
	select {
	case <-stable:
	case <-time.After(waitTimeout):
		t.Fatalf("no stable instance within %v", waitTimeout)
	}
	cancel()
	waitFor(t, s)
	entries := logMessages(t, s.LogTree(), "root.flaky", "restarting in ")
	if len(entries) != failFirst+1 {
		t.Fatalf("got %d restart entries, want %d", len(entries), failFirst+1)
	}

	var delays []time.Duration
	for _, e := range entries {
		d, err := time.ParseDuration(strings.TrimPrefix(e.Message, "restarting in "))
		if err != nil {
			t.Fatalf("restart entry %q: %v", e.Message, err)
		}
		delays = append(delays, d)
	}
	t.Logf("delays: %v", delays)
	for i := 1; i < failFirst; i++ {
		if delays[i] <= delays[i-1] {
			t.Errorf("delay %d = %v, not above delay %d = %v", i, delays[i], i-1, delays[i-1])
		}
	}
	if maxReset := initial * 12 / 10; delays[failFirst] > maxReset {
		t.Errorf("delay after instance %d was healthy = %v, want at most %v", healthyAt, delays[failFirst], maxReset)
	}
	for i := range failFirst + 1 {
		if gap := starts[i+1].Sub(starts[i]); gap < delays[i] {
			t.Errorf("gap between starts %d and %d = %v, shorter than the delay %v", i, i+1, gap, delays[i])
		}
	}
}

// TestBackoffMax checks that WithBackoff's max bounds the delay, jitter
// aside.
func TestBackoffMax(t *testing.T) {
	const (
		initial  = time.Millisecond
		maxDelay = 8 * time.Millisecond
	)
	var starts atomic.Int32
	s, cancel := startTree(t, func(ctx context.Context) error {
		if err := Run(ctx, "failing", func(ctx context.Context) error {
			starts.Add(1)
			return errors.New("always")
		}); err != nil {
			return err
		}
		return idle(ctx)
	}, WithBackoff(initial, maxDelay))
	fixture.Eventually(t, waitTimeout, "10 failed starts", func() error {
		if starts.Load() < 10 {
			return errors.New("fewer than 10 starts")
		}
		return nil
	})
	cancel()
	waitFor(t, s)
	entries := logMessages(t, s.LogTree(), "root.failing", "restarting in ")
	var delays []time.Duration
	for _, e := range entries {
		d, err := time.ParseDuration(strings.TrimPrefix(e.Message, "restarting in "))
		if err != nil {
			t.Fatalf("restart entry %q: %v", e.Message, err)
		}
		delays = append(delays, d)
	}
	t.Logf("delays: %v", delays)
	for i, d := range delays {
		if d > maxDelay*12/10 {
			t.Errorf("delay %d = %v, above the maximum %v and its jitter", i, d, maxDelay)
		}
	}
	if last := delays[len(delays)-1]; last < maxDelay*8/10 {
		t.Errorf("delay after %d deaths = %v, want it at the maximum %v", len(delays), last, maxDelay)
	}
}
