package supervisor

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"cairn.dev/cairn/pkg/fixture"
	"cairn.dev/cairn/pkg/logtree"
)

// TestMain fails the package's tests if any goroutine outlives them.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// waitTimeout bounds every wait of these tests: long enough for a loaded
// machine, short enough that a hang fails instead of stalling the run.
const waitTimeout = 20 * time.Second

// startTree runs root under a new supervisor with fast restarts unless opts
// say otherwise. The tree is cancelled and waited for when the test ends.
func startTree(t testing.TB, root Runnable, opts ...Option) (*Supervisor, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	opts = append([]Option{WithBackoff(time.Millisecond, 10*time.Millisecond)}, opts...)
	s := New(ctx, root, opts...)
	t.Cleanup(func() {
		cancel()
		waitFor(t, s)
	})
	return s, cancel
}

// waitFor returns what s.Wait returns, failing the test if it takes longer
// than waitTimeout.
func waitFor(t testing.TB, s *Supervisor) error {
	t.Helper()
	select {
	case <-s.done:
		return s.Wait()
	case <-time.After(waitTimeout):
		t.Fatalf("supervisor did not stop within %v", waitTimeout)
		return nil
	}
}

// command is what a test tells a fleet runnable to do.
type command int

const (
	cmdFail      command = iota // return an error
	cmdPanic                    // panic
	cmdReturnNil                // return nil without signalling Done
)

var errCommanded = errors.New("commanded to fail")

// fleet builds runnables that report what happens to them and die on
// command. Runnables are known by a key, which tests choose to be their DN.
type fleet struct {
	mu sync.Mutex
	// starts counts the instances started per key.
	starts map[string]int
	// cancels counts the instances that returned because their context
	// was cancelled, per key.
	cancels map[string]int
	// causes holds the cancellation cause each key last saw.
	causes map[string]error
	// live holds the instance of each key that is healthy and waiting
	// for commands.
	live map[string]*instance
}

type instance struct {
	ctx  context.Context
	cmds chan command
}

func newFleet() *fleet {
	return &fleet{
		starts:  map[string]int{},
		cancels: map[string]int{},
		causes:  map[string]error{},
		live:    map[string]*instance{},
	}
}

// runnable returns a runnable for key: it calls children (if not nil) to
// start its children, signals Healthy, and then waits for its context to
// end or for a command.
func (f *fleet) runnable(key string, children func(ctx context.Context) error) Runnable {
	return func(ctx context.Context) error {
		f.mu.Lock()
		f.starts[key]++
		f.mu.Unlock()
		if children != nil {
			if err := children(ctx); err != nil {
				return err
			}
		}
		Signal(ctx, SignalHealthy)
		inst := &instance{ctx: ctx, cmds: make(chan command, 1)}
		f.mu.Lock()
		f.live[key] = inst
		f.mu.Unlock()
		defer func() {
			f.mu.Lock()
			if f.live[key] == inst {
				delete(f.live, key)
			}
			f.mu.Unlock()
		}()
		select {
		case <-ctx.Done():
			f.mu.Lock()
			f.cancels[key]++
			f.causes[key] = context.Cause(ctx)
			f.mu.Unlock()
			return ctx.Err()
		case c := <-inst.cmds:
			switch c {
			case cmdPanic:
				panic(fmt.Sprintf("%s commanded to panic", key))
			case cmdReturnNil:
				return nil
			}
			return fmt.Errorf("%s: %w", key, errCommanded)
		}
	}
}

// leaf is runnable without children.
func (f *fleet) leaf(key string) Runnable {
	return f.runnable(key, nil)
}

// count returns the starts and cancels of key.
func (f *fleet) count(key string) (starts, cancels int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.starts[key], f.cancels[key]
}

// cause returns the cancellation cause key saw last.
func (f *fleet) cause(key string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.causes[key]
}

// waitLive waits until key has been started exactly starts times and its
// current instance is healthy.
func (f *fleet) waitLive(t testing.TB, key string, starts int) {
	t.Helper()
	fixture.Eventually(t, waitTimeout, key+" live", func() error {
		f.mu.Lock()
		defer f.mu.Unlock()
		if got := f.starts[key]; got != starts {
			return fmt.Errorf("%s started %d times, want %d", key, got, starts)
		}
		inst := f.live[key]
		if inst == nil || inst.ctx.Err() != nil {
			return fmt.Errorf("%s is not live", key)
		}
		return nil
	})
}

// send gives key's live instance a command.
func (f *fleet) send(t testing.TB, key string, c command) {
	t.Helper()
	f.mu.Lock()
	inst := f.live[key]
	f.mu.Unlock()
	if inst == nil {
		t.Fatalf("%s is not live", key)
	}
	select {
	case inst.cmds <- c:
	default:
		t.Fatalf("%s already has a command pending", key)
	}
}

// wantCounts checks starts and cancels of every key in want.
func (f *fleet) wantCounts(t testing.TB, want map[string][2]int) {
	t.Helper()
	for key, w := range want {
		starts, cancels := f.count(key)
		if starts != w[0] || cancels != w[1] {
			t.Errorf("%s: started %d, cancelled %d times; want %d, %d", key, starts, cancels, w[0], w[1])
		}
	}
}

// logMessages returns the messages logged to dn (not below it) that
// contain substr.
func logMessages(t testing.TB, lt *logtree.LogTree, dn logtree.DN, substr string) []*logtree.LogEntry {
	t.Helper()
	r, err := lt.Read(dn, logtree.WithBacklog(logtree.BacklogAll))
	if err != nil {
		t.Fatalf("Read(%q): %v", dn, err)
	}
	defer r.Close()
	var out []*logtree.LogEntry
	for _, e := range r.Backlog {
		if strings.Contains(e.Message, substr) {
			out = append(out, e)
		}
	}
	return out
}

// waitLog waits until dn has an entry containing substr, and returns it.
func waitLog(t testing.TB, lt *logtree.LogTree, dn logtree.DN, substr string) *logtree.LogEntry {
	t.Helper()
	var found *logtree.LogEntry
	fixture.Eventually(t, waitTimeout, "log entry in "+string(dn), func() error {
		if es := logMessages(t, lt, dn, substr); len(es) > 0 {
			found = es[0]
			return nil
		}
		return fmt.Errorf("no entry in %s contains %q", dn, substr)
	})
	return found
}
