// Package logstoretest runs a log store (node/logstore) in tests as the
// boots of a node: each boot runs the store under a supervision tree,
// logs, and ends, leaving the store's files behind for the next. It is a
// package of its own so that only test binaries link it, and with it the
// testing package.
package logstoretest

import (
	"context"
	"errors"
	"testing"
	"time"

	"cairn.dev/cairn/node/logstore"
	"cairn.dev/cairn/pkg/supervisor"
	"cairn.dev/cairn/pkg/supervisor/supervisortest"
)

// Boot runs a store of cfg for t as one boot of a node: log is called
// once the store runs (what cfg.Tree held before is its backlog), then
// the boot ends, and Boot returns the store once it has written
// everything and stopped; its Read reads as it did running.
func Boot(t testing.TB, cfg logstore.Config, log func()) *logstore.Store {
	t.Helper()
	s := logstore.New(cfg)
	Run(t, s, log)
	return s
}

// Run runs s once as Boot does: a store run twice in one boot stands for
// a restart by the supervisor.
func Run(t testing.TB, s *logstore.Store, log func()) {
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
