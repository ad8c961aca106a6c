package supervisor

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
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

// TestTestHarness checks that the harness prints the tree's log to the test
// and that its cleanup stops every runnable before the test ends.
func TestTestHarness(t *testing.T) {
	rec := &recordingTB{}
	var returned sync.WaitGroup
	t.Run("harness", func(t *testing.T) {
		rec.TB = t
		returned.Add(2)
		child := func(ctx context.Context) error {
			defer returned.Done()
			return idle(ctx)
		}
		_, lt := TestHarness(rec, func(ctx context.Context) error {
			defer returned.Done()
			Logger(ctx).Info("harness says hi")
			if err := Run(ctx, "child", child); err != nil {
				return err
			}
			return idle(ctx)
		})
		waitLog(t, lt, "root", "harness says hi")
	})
	// Cleanup has run: Wait would block forever if a runnable had not
	// returned.
	returned.Wait()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	var found bool
	for _, l := range rec.lines {
		if strings.Contains(l, "root supervisor_testhelpers_test.go:") && strings.HasSuffix(l, "] harness says hi") {
			found = true
		}
	}
	if !found {
		t.Errorf("test log %q lacks the runnable's entry", rec.lines)
	}
}
