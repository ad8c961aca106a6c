package main

import (
	"context"
	"sync"
	"testing"
	"time"

	"cairn.dev/cairn/pkg/supervisor"
	"cairn.dev/cairn/pkg/supervisor/supervisortest"
)

// TestRootStartsChildren runs the root with two children and waits for
// both to run under their names.
func TestRootStartsChildren(t *testing.T) {
	var mu sync.Mutex
	started := map[string]bool{}
	record := func(name string) supervisor.Runnable {
		return func(ctx context.Context) error {
			mu.Lock()
			started[name] = true
			mu.Unlock()
			supervisor.Signal(ctx, supervisor.SignalHealthy)
			<-ctx.Done()
			return ctx.Err()
		}
	}
	supervisortest.Harness(t, rootRunnable([]child{{"alpha", record("alpha")}, {"beta", record("beta")}}, nil))
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n := len(started)
		mu.Unlock()
		if n == 2 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("started %v, want alpha and beta", started)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
