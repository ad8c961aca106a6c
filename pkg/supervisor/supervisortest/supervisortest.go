// Package supervisortest runs supervision trees in tests: a tree that
// logs to the test and is stopped, and waited for, when the test ends. It
// is a package of its own so that only test binaries link it, and with it
// the testing package: production binaries import pkg/supervisor alone.
package supervisortest

import (
	"context"
	"testing"

	"cairn.dev/cairn/pkg/fixture"
	"cairn.dev/cairn/pkg/logtree"
	"cairn.dev/cairn/pkg/supervisor"
)

// Harness runs r as the root of a new supervision tree for the test t.
// Panics propagate (WithPropagatePanic), so a panicking runnable fails the
// test with its stack. Every log entry of the tree is printed with t.Log.
//
// It returns a function that cancels the tree, and the log tree. When the
// test ends, the tree is cancelled and the cleanup waits for every runnable
// to return, so that no goroutine of the tree outlives the test.
func Harness(t testing.TB, r supervisor.Runnable) (context.CancelFunc, *logtree.LogTree) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	lt := logtree.New()
	w := fixture.NewLogWriter(t, "")
	stopConsole := lt.Console(w)
	s := supervisor.New(ctx, r, supervisor.WithPropagatePanic(), supervisor.WithLogTree(lt))
	t.Cleanup(func() {
		cancel()
		if err := s.Wait(); err != nil {
			t.Errorf("supervisor: %v", err)
		}
		stopConsole()
		w.Close()
	})
	return cancel, lt
}
