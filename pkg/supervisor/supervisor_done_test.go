package supervisor

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"cairn.dev/cairn/pkg/fixture"
)

// oneShot returns a runnable that does its work (nothing), signals Healthy
// and Done, and returns nil, counting its starts.
func oneShot(starts *atomic.Int32) Runnable {
	return func(ctx context.Context) error {
		starts.Add(1)
		Signal(ctx, SignalHealthy)
		Signal(ctx, SignalDone)
		return nil
	}
}

// TestDoneNeverRestarted runs a tree where every runnable finishes: nothing
// is restarted, so the tree ends on its own and Wait returns without the
// context being cancelled.
func TestDoneNeverRestarted(t *testing.T) {
	var rootStarts, childStarts atomic.Int32
	root := func(ctx context.Context) error {
		rootStarts.Add(1)
		if err := Run(ctx, "child", oneShot(&childStarts)); err != nil {
			return err
		}
		Signal(ctx, SignalHealthy)
		Signal(ctx, SignalDone)
		return nil
	}
	s, _ := startTree(t, root)
	if err := waitFor(t, s); err != nil {
		t.Errorf("Wait() = %v, want nil", err)
	}
	if r, c := rootStarts.Load(), childStarts.Load(); r != 1 || c != 1 {
		t.Errorf("root started %d, child %d times; want 1, 1", r, c)
	}
}

// TestDoneKeepsChildren checks the chosen semantics of Done: a runnable that
// finished leaves its children running and supervised.
func TestDoneKeepsChildren(t *testing.T) {
	f := newFleet()
	var parentStarts atomic.Int32
	returned := make(chan struct{})
	parent := func(ctx context.Context) error {
		parentStarts.Add(1)
		if err := Run(ctx, "kid", f.leaf("root.parent.kid")); err != nil {
			return err
		}
		Signal(ctx, SignalHealthy)
		Signal(ctx, SignalDone)
		close(returned)
		return nil
	}
	root := f.runnable("root", func(ctx context.Context) error { return Run(ctx, "parent", parent) })
	startTree(t, root)
	f.waitLive(t, "root.parent.kid", 1)
	<-returned

	f.send(t, "root.parent.kid", cmdFail)
	f.waitLive(t, "root.parent.kid", 2)
	if n := parentStarts.Load(); n != 1 {
		t.Errorf("finished parent started %d times, want 1", n)
	}
	f.wantCounts(t, map[string][2]int{"root": {1, 0}, "root.parent.kid": {2, 0}})
}

// TestDoneInGroup checks that Done does not take a runnable out of its
// group: a sibling's death runs the finished member again.
func TestDoneInGroup(t *testing.T) {
	f := newFleet()
	var doneStarts atomic.Int32
	root := f.runnable("root", func(ctx context.Context) error {
		return RunGroup(ctx, map[string]Runnable{
			"oneshot": oneShot(&doneStarts),
			"worker":  f.leaf("root.worker"),
		})
	})
	startTree(t, root)
	f.waitLive(t, "root.worker", 1)
	fixture.Eventually(t, waitTimeout, "oneshot run", func() error {
		if doneStarts.Load() != 1 {
			return errors.New("oneshot has not run")
		}
		return nil
	})
	f.send(t, "root.worker", cmdFail)
	f.waitLive(t, "root.worker", 2)
	fixture.Eventually(t, waitTimeout, "oneshot run again with its group", func() error {
		if n := doneStarts.Load(); n != 2 {
			return fmt.Errorf("oneshot started %d times, want 2 (once more with its group)", n)
		}
		return nil
	})
}

// TestDoneBeforeHealthy checks that signalling Done without Healthy kills
// the runnable.
func TestDoneBeforeHealthy(t *testing.T) {
	var starts atomic.Int32
	early := func(ctx context.Context) error {
		if starts.Add(1) > 1 {
			Signal(ctx, SignalHealthy)
		}
		Signal(ctx, SignalDone)
		<-ctx.Done()
		return nil
	}
	root := func(ctx context.Context) error {
		if err := Run(ctx, "early", early); err != nil {
			return err
		}
		Signal(ctx, SignalHealthy)
		<-ctx.Done()
		return ctx.Err()
	}
	s, _ := startTree(t, root)
	e := waitLog(t, s.LogTree(), "root.early", "died: signalled Done before Healthy")
	if !strings.HasPrefix(e.Message, "died:") {
		t.Errorf("entry = %q", e.Message)
	}
	fixture.Eventually(t, waitTimeout, "early restarted", func() error {
		if starts.Load() < 2 {
			return errors.New("not restarted yet")
		}
		return nil
	})
}

// TestDoneFailure checks that a runnable that signalled Done and then
// returns an error died all the same.
func TestDoneFailure(t *testing.T) {
	var starts atomic.Int32
	liar := func(ctx context.Context) error {
		Signal(ctx, SignalHealthy)
		Signal(ctx, SignalDone)
		if starts.Add(1) == 1 {
			return errors.New("broken promise")
		}
		return nil
	}
	root := func(ctx context.Context) error {
		if err := Run(ctx, "liar", liar); err != nil {
			return err
		}
		Signal(ctx, SignalHealthy)
		Signal(ctx, SignalDone)
		return nil
	}
	s, _ := startTree(t, root)
	if err := waitFor(t, s); err != nil {
		t.Errorf("Wait() = %v, want nil", err)
	}
	if n := starts.Load(); n != 2 {
		t.Errorf("liar started %d times, want 2", n)
	}
	if es := logMessages(t, s.LogTree(), "root.liar", "died: broken promise"); len(es) != 1 {
		t.Errorf("got %d death entries, want 1", len(es))
	}
}
