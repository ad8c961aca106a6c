//go:build cairntest

package main

import (
	"context"
	"errors"
	"testing"

	"cairn.dev/cairn/pkg/logtree"
	"cairn.dev/cairn/pkg/supervisor"
)

// TestRootFailForTest checks the test-only flag: the root fails at once,
// the tree (under WithRootFatal, as in the core) stops, and Wait says why.
func TestRootFailForTest(t *testing.T) {
	childRan := make(chan struct{}, 1)
	children := []child{{"never", func(ctx context.Context) error {
		childRan <- struct{}{}
		<-ctx.Done()
		return ctx.Err()
	}}}
	s := supervisor.New(context.Background(), rootRunnable(children, testFlags{rootFail: true}.rootFailure()),
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
