//go:build cairntest

package testpoint

import (
	"context"
	"errors"
	"testing"
	"time"

	"cairn.dev/cairn/node/marker"
	"cairn.dev/cairn/pkg/logtree"
	"cairn.dev/cairn/pkg/supervisor/supervisortest"
)

// TestReachStopsAtTheArmedStep runs a runnable that passes every step
// under a context armed for one: it goes past the others, states the
// marker at the armed one and stays there until it is stopped.
func TestReachStopsAtTheArmedStep(t *testing.T) {
	for _, armed := range []Step{GPTWritten, Committed, Sealed} {
		t.Run(string(armed), func(t *testing.T) {
			passed := make(chan Step, len(Steps()))
			returned := make(chan error, 1)
			cancel, lt := supervisortest.Harness(t, func(ctx context.Context) error {
				ctx = WithStopAt(ctx, armed)
				for _, s := range Steps() {
					if err := Reach(ctx, s); err != nil {
						returned <- err
						return err
					}
					passed <- s
				}
				returned <- nil
				<-ctx.Done()
				return ctx.Err()
			})
			m := waitMarker(t, lt)
			if !m.Is(marker.TestPointReached, "name", string(armed)) {
				t.Errorf("marker = %+v, want %s name=%s", m, marker.TestPointReached, armed)
			}
			// Every step before the armed one was passed, none after.
			close(passed)
			var got []Step
			for s := range passed {
				got = append(got, s)
			}
			for i, s := range Steps() {
				if s == armed {
					if len(got) != i {
						t.Errorf("passed %q before stopping at %q, want the %d steps before it", got, armed, i)
					}
					break
				}
			}
			select {
			case err := <-returned:
				t.Fatalf("Reach returned %v before the runnable was stopped", err)
			case <-time.After(100 * time.Millisecond):
			}
			cancel()
			select {
			case err := <-returned:
				if !errors.Is(err, context.Canceled) {
					t.Errorf("Reach after the stop = %v, want an error wrapping context.Canceled", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Reach did not return once the runnable was stopped")
			}
		})
	}
}

// waitMarker waits for the first marker in the log tree.
func waitMarker(t *testing.T, lt *logtree.LogTree) marker.Marker {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		r, err := lt.Read("", logtree.WithChildren(), logtree.WithBacklog(logtree.BacklogAll))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range r.Backlog {
			if m, ok := marker.Parse(e.Message); ok {
				r.Close()
				return m
			}
		}
		r.Close()
	}
	t.Fatal("no marker within 10 s")
	return marker.Marker{}
}
