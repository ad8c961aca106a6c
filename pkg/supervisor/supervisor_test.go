package supervisor

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"cairn.dev/cairn/pkg/logtree"
)

// TestSimple starts a root with one child and checks both become healthy
// and log under their DNs.
func TestSimple(t *testing.T) {
	f := newFleet()
	child := func(ctx context.Context) error {
		Logger(ctx).Infof("hello from the child")
		return f.leaf("root.child")(ctx)
	}
	root := f.runnable("root", func(ctx context.Context) error {
		Logger(ctx).Info("hello from the root")
		return Run(ctx, "child", child)
	})
	s, _ := startTree(t, root)
	f.waitLive(t, "root", 1)
	f.waitLive(t, "root.child", 1)

	for dn, msg := range map[logtree.DN]string{
		"root":       "hello from the root",
		"root.child": "hello from the child",
	} {
		e := waitLog(t, s.LogTree(), dn, msg)
		if e.DN != dn || e.Severity != logtree.INFO || e.File != "supervisor_test.go" {
			t.Errorf("entry %q: DN %q, severity %v, file %q; want %q, INFO, supervisor_test.go", e.Message, e.DN, e.Severity, e.File, dn)
		}
	}
}

// TestRawLogger checks that lines written to RawLogger land as raw entries
// under the runnable's DN.
func TestRawLogger(t *testing.T) {
	root := func(ctx context.Context) error {
		return Run(ctx, "raw", func(ctx context.Context) error {
			w := RawLogger(ctx)
			defer w.Close()
			if _, err := w.Write([]byte("first line\nsecond")); err != nil {
				return err
			}
			Signal(ctx, SignalHealthy)
			<-ctx.Done()
			return ctx.Err()
		})
	}
	s, cancel := startTree(t, func(ctx context.Context) error {
		if err := root(ctx); err != nil {
			return err
		}
		Signal(ctx, SignalHealthy)
		<-ctx.Done()
		return ctx.Err()
	})
	e := waitLog(t, s.LogTree(), "root.raw", "first line")
	if !e.Raw || e.Message != "first line" {
		t.Errorf("entry = %q (raw %v), want raw %q", e.Message, e.Raw, "first line")
	}
	cancel()
	waitFor(t, s)
	if es := logMessages(t, s.LogTree(), "root.raw", "second"); len(es) != 1 || !es[0].Raw {
		t.Errorf("partial line after Close: got %d entries, want one raw entry", len(es))
	}
}

// TestDeath checks each way of dying: the runnable is restarted and the
// reason is logged under its DN.
func TestDeath(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cmd     command
		wantLog string
	}{
		{"error", cmdFail, "died: root.victim: commanded to fail"},
		{"nil without Done", cmdReturnNil, "died: returned nil without signalling Done"},
		{"panic", cmdPanic, "died: panic: root.victim commanded to panic"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFleet()
			root := f.runnable("root", func(ctx context.Context) error {
				return Run(ctx, "victim", f.leaf("root.victim"))
			})
			s, _ := startTree(t, root)
			f.waitLive(t, "root.victim", 1)
			f.send(t, "root.victim", tc.cmd)
			f.waitLive(t, "root.victim", 2)
			f.wantCounts(t, map[string][2]int{"root": {1, 0}})

			e := waitLog(t, s.LogTree(), "root.victim", tc.wantLog)
			if e.Severity != logtree.ERROR {
				t.Errorf("death logged as %v, want ERROR", e.Severity)
			}
			r := waitLog(t, s.LogTree(), "root.victim", "restarting in ")
			delay := strings.TrimPrefix(r.Message, "restarting in ")
			if _, err := time.ParseDuration(delay); err != nil {
				t.Errorf("restart entry %q: no delay: %v", r.Message, err)
			}
		})
	}
}

// TestPanicStack checks that a recovered panic is logged with its stack.
func TestPanicStack(t *testing.T) {
	f := newFleet()
	s, _ := startTree(t, f.runnable("root", func(ctx context.Context) error {
		return Run(ctx, "victim", f.leaf("root.victim"))
	}))
	f.waitLive(t, "root.victim", 1)
	f.send(t, "root.victim", cmdPanic)
	f.waitLive(t, "root.victim", 2)
	e := waitLog(t, s.LogTree(), "root.victim", "panic:")
	if !strings.Contains(e.Message, "goroutine ") || !strings.Contains(e.Message, "fixture_test.go") {
		t.Errorf("panic entry has no stack:\n%s", e.Message)
	}
}

// TestRootRestart checks that a dying root is restarted like any runnable.
func TestRootRestart(t *testing.T) {
	f := newFleet()
	startTree(t, f.leaf("root"))
	f.waitLive(t, "root", 1)
	f.send(t, "root", cmdFail)
	f.waitLive(t, "root", 2)
}

// TestDeepFailure kills a grandchild: only it and its subtree restart.
//
//	root ─┬─ a ─┬─ b ─── c ─── d
//	      │     └─ b2
//	      └─ a2
func TestDeepFailure(t *testing.T) {
	f := newFleet()
	d := f.leaf("root.a.b.c.d")
	c := f.runnable("root.a.b.c", func(ctx context.Context) error { return Run(ctx, "d", d) })
	b := f.runnable("root.a.b", func(ctx context.Context) error { return Run(ctx, "c", c) })
	a := f.runnable("root.a", func(ctx context.Context) error {
		if err := Run(ctx, "b", b); err != nil {
			return err
		}
		return Run(ctx, "b2", f.leaf("root.a.b2"))
	})
	root := f.runnable("root", func(ctx context.Context) error {
		if err := Run(ctx, "a", a); err != nil {
			return err
		}
		return Run(ctx, "a2", f.leaf("root.a2"))
	})
	startTree(t, root)
	f.waitLive(t, "root.a.b.c.d", 1)
	f.waitLive(t, "root.a2", 1)
	f.waitLive(t, "root.a.b2", 1)

	f.send(t, "root.a.b.c", cmdFail)
	f.waitLive(t, "root.a.b.c", 2)
	f.waitLive(t, "root.a.b.c.d", 2)
	f.wantCounts(t, map[string][2]int{
		"root":         {1, 0},
		"root.a":       {1, 0},
		"root.a.b":     {1, 0},
		"root.a.b2":    {1, 0},
		"root.a2":      {1, 0},
		"root.a.b.c":   {2, 0},
		"root.a.b.c.d": {2, 1},
	})
}

// TestGroupFailure kills a member of a group: the whole group restarts, a
// sibling outside the group is untouched.
func TestGroupFailure(t *testing.T) {
	f := newFleet()
	root := f.runnable("root", func(ctx context.Context) error {
		err := RunGroup(ctx, map[string]Runnable{
			"x": f.runnable("root.x", func(ctx context.Context) error {
				return Run(ctx, "kid", f.leaf("root.x.kid"))
			}),
			"y": f.leaf("root.y"),
		})
		if err != nil {
			return err
		}
		return Run(ctx, "z", f.leaf("root.z"))
	})
	s, _ := startTree(t, root)
	f.waitLive(t, "root.x.kid", 1)
	f.waitLive(t, "root.y", 1)
	f.waitLive(t, "root.z", 1)

	f.send(t, "root.y", cmdFail)
	f.waitLive(t, "root.x", 2)
	f.waitLive(t, "root.x.kid", 2)
	f.waitLive(t, "root.y", 2)
	f.wantCounts(t, map[string][2]int{
		"root":       {1, 0},
		"root.x":     {2, 1},
		"root.x.kid": {2, 1},
		"root.y":     {2, 0},
		"root.z":     {1, 0},
	})
	if cause := f.cause("root.x"); cause == nil || !strings.Contains(cause.Error(), "group sibling root.y died") {
		t.Errorf("root.x cancellation cause = %v, want the death of root.y", cause)
	}
	waitLog(t, s.LogTree(), "root.x", "with its group (root.x, root.y)")
}

// TestCancelSubtree kills a parent: the cancellation reaches every
// descendant, which all come back with it.
func TestCancelSubtree(t *testing.T) {
	f := newFleet()
	c := f.leaf("root.a.b.c")
	b := f.runnable("root.a.b", func(ctx context.Context) error { return Run(ctx, "c", c) })
	a := f.runnable("root.a", func(ctx context.Context) error {
		if err := Run(ctx, "b", b); err != nil {
			return err
		}
		return Run(ctx, "d", f.leaf("root.a.d"))
	})
	startTree(t, f.runnable("root", func(ctx context.Context) error { return Run(ctx, "a", a) }))
	f.waitLive(t, "root.a.b.c", 1)
	f.waitLive(t, "root.a.d", 1)

	f.send(t, "root.a", cmdFail)
	for _, key := range []string{"root.a", "root.a.b", "root.a.b.c", "root.a.d"} {
		f.waitLive(t, key, 2)
	}
	for _, key := range []string{"root.a.b", "root.a.b.c", "root.a.d"} {
		if _, cancels := f.count(key); cancels != 1 {
			t.Errorf("%s cancelled %d times, want 1", key, cancels)
		}
		if cause := f.cause(key); !errors.Is(cause, errCommanded) || !strings.Contains(cause.Error(), "root.a died") {
			t.Errorf("%s cancellation cause = %v, want the death of root.a", key, cause)
		}
	}
	f.wantCounts(t, map[string][2]int{"root": {1, 0}})
}

// TestRootCancel cancels the tree: every runnable sees it and Wait returns
// nil once all have returned.
func TestRootCancel(t *testing.T) {
	f := newFleet()
	keys := []string{"root", "root.a", "root.a.b", "root.c"}
	b := f.leaf("root.a.b")
	a := f.runnable("root.a", func(ctx context.Context) error { return Run(ctx, "b", b) })
	root := f.runnable("root", func(ctx context.Context) error {
		return RunGroup(ctx, map[string]Runnable{"a": a, "c": f.leaf("root.c")})
	})
	s, cancel := startTree(t, root)
	for _, key := range keys {
		f.waitLive(t, key, 1)
	}
	cancel()
	if err := waitFor(t, s); err != nil {
		t.Errorf("Wait() = %v, want nil", err)
	}
	for _, key := range keys {
		if starts, cancels := f.count(key); starts != 1 || cancels != 1 {
			t.Errorf("%s: started %d, cancelled %d times; want 1, 1", key, starts, cancels)
		}
	}
}

// TestRootCancelDuringBackoff cancels the tree while the only runnable is
// waiting to be restarted: Wait must not wait for the restart.
func TestRootCancelDuringBackoff(t *testing.T) {
	f := newFleet()
	s, cancel := startTree(t, f.leaf("root"), WithBackoff(time.Hour, time.Hour))
	f.waitLive(t, "root", 1)
	f.send(t, "root", cmdFail)
	waitLog(t, s.LogTree(), "root", "restarting in ")
	cancel()
	if err := waitFor(t, s); err != nil {
		t.Errorf("Wait() = %v, want nil", err)
	}
}

// TestRootFatal checks that under WithRootFatal a dead root ends the tree
// and Wait returns its error.
func TestRootFatal(t *testing.T) {
	f := newFleet()
	root := f.runnable("root", func(ctx context.Context) error {
		return Run(ctx, "child", f.leaf("root.child"))
	})
	s, _ := startTree(t, root, WithRootFatal())
	f.waitLive(t, "root.child", 1)
	f.send(t, "root", cmdFail)
	err := waitFor(t, s)
	if !errors.Is(err, errCommanded) {
		t.Errorf("Wait() = %v, want the root's error", err)
	}
	f.wantCounts(t, map[string][2]int{"root": {1, 0}, "root.child": {1, 1}})
}

// TestRootFatalChildDeath checks that WithRootFatal leaves the deaths of
// other runnables to ordinary restarts.
func TestRootFatalChildDeath(t *testing.T) {
	f := newFleet()
	root := f.runnable("root", func(ctx context.Context) error {
		return Run(ctx, "child", f.leaf("root.child"))
	})
	startTree(t, root, WithRootFatal())
	f.waitLive(t, "root.child", 1)
	f.send(t, "root.child", cmdFail)
	f.waitLive(t, "root.child", 2)
	f.wantCounts(t, map[string][2]int{"root": {1, 0}})
}

// panicChildEnv makes the test binary, run again by TestPropagatePanic, be
// the program that panics.
const panicChildEnv = "CAIRN_SUPERVISOR_PANIC_CHILD"

// TestPropagatePanic checks that WithPropagatePanic lets a panic crash the
// program. As that ends the process, it runs in a copy of the test binary.
func TestPropagatePanic(t *testing.T) {
	if os.Getenv(panicChildEnv) != "" {
		s := New(context.Background(), func(ctx context.Context) error {
			panic("propagated on purpose")
		}, WithPropagatePanic())
		s.Wait()
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestPropagatePanic$")
	cmd.Env = append(os.Environ(), panicChildEnv+"=1")
	out, err := cmd.CombinedOutput()
	var exitErr *exec.ExitError
	if !errors.As(err, &exitErr) || exitErr.ExitCode() != 2 {
		t.Fatalf("child exited with %v, want exit status 2 (a panic); output:\n%s", err, out)
	}
	if !strings.Contains(string(out), "panic: propagated on purpose") {
		t.Errorf("child output lacks the panic:\n%s", out)
	}
}

// TestRestartWaitsForReturn checks that a group is restarted only once
// every runnable in it and below it has returned, however long one of them
// takes to heed its cancellation: two instances of a runnable never run at
// once.
func TestRestartWaitsForReturn(t *testing.T) {
	for _, tc := range []struct {
		name string
		// lingerer is the DN of the runnable that is slow to return.
		lingerer string
	}{
		{"group sibling", "root.sibling"},
		{"child", "root.victim.child"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFleet()
			release := make(chan struct{})
			var lingerStarts, victimStarts atomic.Int32
			var firstReturned atomic.Bool // the first lingerer has returned
			var overlaps atomic.Int32
			linger := func(ctx context.Context) error {
				first := lingerStarts.Add(1) == 1
				err := f.leaf(tc.lingerer)(ctx)
				if first {
					<-release
					firstReturned.Store(true)
				}
				return err
			}
			victim := func(ctx context.Context) error {
				if victimStarts.Add(1) > 1 && !firstReturned.Load() {
					overlaps.Add(1)
				}
				return f.runnable("root.victim", func(ctx context.Context) error {
					if tc.lingerer == "root.victim.child" {
						return Run(ctx, "child", linger)
					}
					return nil
				})(ctx)
			}
			root := f.runnable("root", func(ctx context.Context) error {
				group := map[string]Runnable{"victim": victim}
				if tc.lingerer == "root.sibling" {
					group["sibling"] = linger
				}
				return RunGroup(ctx, group)
			})
			startTree(t, root)
			f.waitLive(t, tc.lingerer, 1)
			f.waitLive(t, "root.victim", 1)
			f.send(t, "root.victim", cmdFail)
			// Give a supervisor that does not wait time to go wrong.
			time.Sleep(50 * time.Millisecond)
			close(release)
			f.waitLive(t, "root.victim", 2)
			f.waitLive(t, tc.lingerer, 2)
			if n := overlaps.Load(); n != 0 {
				t.Errorf("root.victim restarted %d times while %s had not returned", n, tc.lingerer)
			}
		})
	}
}

// TestDone checks that Done stays open while a runnable of the tree runs,
// even once the tree's context ended, and closes when Wait returns.
func TestDone(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	release := make(chan struct{})
	s := New(ctx, func(ctx context.Context) error {
		Signal(ctx, SignalHealthy)
		<-ctx.Done()
		<-release
		return ctx.Err()
	})
	cancel()
	select {
	case <-s.Done():
		t.Fatal("Done closed while the root still runs")
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	select {
	case <-s.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Done not closed 10 s after the root returned")
	}
	s.Wait()
}
