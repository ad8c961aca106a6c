package supervisortest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"cairn.dev/cairn/pkg/fixture"
	"cairn.dev/cairn/pkg/logtree"
	"cairn.dev/cairn/pkg/supervisor"
)

// recordingTB is a testing.TB that keeps what is logged to it.
type recordingTB struct {
	testing.TB
	mu    sync.Mutex
	lines []string
}

func (r *recordingTB) Log(args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lines = append(r.lines, fmt.Sprint(args...))
}

// idle says it is healthy and runs until it is stopped.
func idle(ctx context.Context) error {
	supervisor.Signal(ctx, supervisor.SignalHealthy)
	<-ctx.Done()
	return ctx.Err()
}

// TestHarness checks that the harness prints the tree's log to the test
// and that its cleanup stops every runnable before the test ends.
func TestHarness(t *testing.T) {
	rec := &recordingTB{}
	var returned sync.WaitGroup
	ok := t.Run("harness", func(t *testing.T) {
		rec.TB = t
		returned.Add(2)
		childStarted := make(chan struct{})
		child := func(ctx context.Context) error {
			defer returned.Done()
			close(childStarted)
			return idle(ctx)
		}
		_, lt := Harness(rec, func(ctx context.Context) error {
			defer returned.Done()
			supervisor.Logger(ctx).Info("harness says hi")
			if err := supervisor.Run(ctx, "child", child); err != nil {
				return err
			}
			return idle(ctx)
		})
		fixture.Eventually(t, 20*time.Second, "the root's log entry", func() error {
			r, err := lt.Read("root", logtree.WithBacklog(logtree.BacklogAll))
			if err != nil {
				return err
			}
			defer r.Close()
			for _, e := range r.Backlog {
				if e.Message == "harness says hi" {
					return nil
				}
			}
			return fmt.Errorf("no entry of root says hi")
		})
		// Stopped before the root starts its child, the child never
		// runs and never returns: wait for it to run.
		select {
		case <-childStarted:
		case <-time.After(20 * time.Second):
			t.Fatal("the child did not start within 20 s")
		}
	})
	if !ok {
		return
	}
	// Cleanup has run: Wait would block forever if a runnable had not
	// returned.
	returned.Wait()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	var found bool
	for _, l := range rec.lines {
		if strings.Contains(l, "root supervisortest_test.go:") && strings.HasSuffix(l, "] harness says hi") {
			found = true
		}
	}
	if !found {
		t.Errorf("test log %q lacks the runnable's entry", rec.lines)
	}
}
