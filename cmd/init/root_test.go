package main

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"cairn.dev/cairn/pkg/logtree"
	"cairn.dev/cairn/pkg/supervisor"
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
	supervisor.TestHarness(t, rootRunnable([]child{{"alpha", record("alpha")}, {"beta", record("beta")}}, false))
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

// TestRootFailForTest checks the test-only flag: the root fails at once,
// the tree (under WithRootFatal, as in the core) stops, and Wait says why.
func TestRootFailForTest(t *testing.T) {
	childRan := make(chan struct{}, 1)
	children := []child{{"never", func(ctx context.Context) error {
		childRan <- struct{}{}
		<-ctx.Done()
		return ctx.Err()
	}}}
	s := supervisor.New(context.Background(), rootRunnable(children, true),
		supervisor.WithRootFatal(), supervisor.WithLogTree(logtree.New()))
	if err := s.Wait(); !errors.Is(err, errTestRootFail) {
		t.Errorf("Wait() = %v, want %v", err, errTestRootFail)
	}
	select {
	case <-childRan:
		t.Errorf("a child ran, want none under %s", flagTestRootFail)
	default:
	}
}
