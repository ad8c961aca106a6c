package logstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"cairn.dev/cairn/pkg/supervisor"
	"cairn.dev/cairn/pkg/supervisor/supervisortest"
)

// BootForTest runs a store of cfg for t as one boot of a node: log is
// called once the store runs (what cfg.Tree held before is its
// backlog), then the boot ends, and BootForTest returns the store once it
// has written everything and stopped; its Read reads as it did running.
func BootForTest(t testing.TB, cfg Config, log func()) *Store {
	t.Helper()
	s := New(cfg)
	runForTest(t, s, log)
	return s
}

// runForTest runs s once as BootForTest does.
func runForTest(t testing.TB, s *Store, log func()) {
	t.Helper()
	running := make(chan struct{})
	done := make(chan error, 1)
	cancel, _ := supervisortest.Harness(t, func(ctx context.Context) error {
		if err := supervisor.Run(ctx, "store", func(ctx context.Context) error {
			err := s.Run(ctx)
			done <- err
			return err
		}); err != nil {
			return err
		}
		close(running)
		<-ctx.Done()
		return ctx.Err()
	})
	<-running
	log()
	// A moment for the store to take the entries as they come; those
	// still waiting when the boot ends are drained anyway.
	time.Sleep(50 * time.Millisecond)
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("log store ended with %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("log store did not end")
	}
}
