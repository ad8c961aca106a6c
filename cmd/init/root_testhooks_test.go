//go:build cairntest

package main

import (
	"context"
	"errors"
	"testing"
	"time"

	"cairn.dev/cairn/node/marker"
	"cairn.dev/cairn/node/testpoint"
	"cairn.dev/cairn/pkg/cmdline"
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
	f, _ := parseFlags(cmdline.Parse("cairn.test.root-fail"))
	fail := f.test.RootFailure()
	if fail == nil {
		t.Fatal("cairn.test.root-fail: RootFailure() = nil, want an error")
	}
	s := supervisor.New(context.Background(), rootRunnable(children, fail),
		supervisor.WithRootFatal(), supervisor.WithLogTree(logtree.New()))
	if err := s.Wait(); !errors.Is(err, fail) {
		t.Errorf("Wait() = %v, want %v", err, fail)
	}
	select {
	case <-childRan:
		t.Errorf("a child ran, want none under cairn.test.root-fail")
	default:
	}
}

// TestStopAtReachesRunnables checks the wiring of cairn.test.stop-at as
// the core does it: the tree runs under the context ArmTestPoint returns,
// and a runnable deep in it stops at the step the flag names, stating the
// marker, while another step goes by.
func TestStopAtReachesRunnables(t *testing.T) {
	f, notes := parseFlags(cmdline.Parse("cairn.test.stop-at=registered"))
	if len(notes) != 0 {
		t.Fatalf("parseFlags: notes %q", notes)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	lt := logtree.New()
	passed := make(chan testpoint.Step, 2)
	children := []child{{"cluster", func(ctx context.Context) error {
		return supervisor.Run(ctx, "enrolment", func(ctx context.Context) error {
			for _, s := range []testpoint.Step{testpoint.GPTWritten, testpoint.Registered} {
				if err := testpoint.Reach(ctx, s); err != nil {
					return err
				}
				passed <- s
			}
			<-ctx.Done()
			return ctx.Err()
		})
	}}}
	s := supervisor.New(f.test.ArmTestPoint(ctx), rootRunnable(children, nil), supervisor.WithLogTree(lt))
	want := marker.Format(marker.TestPointReached, "name", string(testpoint.Registered))
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q in the log tree within 10 s", want)
		}
		r, err := lt.Read("root.cluster.enrolment", logtree.WithBacklog(logtree.BacklogAll))
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, e := range r.Backlog {
			found = found || e.Message == want
		}
		r.Close()
		if found {
			break
		}
	}
	cancel()
	s.Wait()
	close(passed)
	var got []testpoint.Step
	for p := range passed {
		got = append(got, p)
	}
	if len(got) != 1 || got[0] != testpoint.GPTWritten {
		t.Errorf("steps passed = %q, want only %q before the stop", got, testpoint.GPTWritten)
	}
}
