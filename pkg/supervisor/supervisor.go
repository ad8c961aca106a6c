package supervisor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode"

	"cairn.dev/cairn/pkg/logtree"
)

// Runnable is a unit of long-running work. It runs until its context is
// cancelled and then returns, or returns an error when it cannot continue.
// Returning nil is only correct after signalling SignalDone; anything else
// counts as a death and leads to a restart.
type Runnable func(ctx context.Context) error

// SignalType is what a runnable tells the supervisor about itself.
type SignalType int

const (
	// SignalHealthy says the runnable has finished starting up and is
	// doing its work. It resets the restart backoff of its group.
	SignalHealthy SignalType = iota
	// SignalDone says the runnable has finished its work and will return
	// nil: it is never restarted on its own account. Only a healthy
	// runnable may signal Done; its children keep running.
	SignalDone
)

// String returns the signal's name, for logs.
func (s SignalType) String() string {
	switch s {
	case SignalHealthy:
		return "Healthy"
	case SignalDone:
		return "Done"
	}
	return fmt.Sprintf("SignalType(%d)", int(s))
}

const (
	// rootName is the name, and so the DN, of the root runnable.
	rootName = "root"
	// minBackoff is the smallest restart delay the supervisor will use: a
	// runnable that fails at once must never make it spin.
	minBackoff = time.Millisecond
	// defaultInitialBackoff and defaultMaxBackoff bound the restart delay
	// unless WithBackoff says otherwise.
	defaultInitialBackoff = 100 * time.Millisecond
	defaultMaxBackoff     = 30 * time.Second
	// defaultCommandKillGrace is how long RunCommand waits after SIGTERM
	// before it sends SIGKILL.
	defaultCommandKillGrace = 2 * time.Second
)

// Supervisor runs one tree of runnables. It is created by New and stops when
// every runnable in it has returned and none is due to be restarted: after
// the context given to New is cancelled, after the root died under
// WithRootFatal, or after every runnable signalled Done and returned.
type Supervisor struct {
	lt *logtree.LogTree

	propagatePanic   bool
	rootFatal        bool
	initialBackoff   time.Duration
	maxBackoff       time.Duration
	commandKillGrace time.Duration

	// ctx is the context given to New; the root's context derives from it.
	ctx context.Context

	// Requests to the processor goroutine. Every one of them is received
	// as long as done is open.
	scheduleC chan *scheduleRequest
	signalC   chan *signalRequest
	diedC     chan *diedRequest
	inspectC  chan chan<- map[logtree.DN]nodeState

	// done is closed by the processor when it returns: every runnable has
	// returned, and err holds what Wait reports.
	done chan struct{}
	err  error

	// restartHook, when not nil, hears of every restart (WithRestartHook).
	restartHook func(dn string)

	// state is owned by the processor goroutine: nothing else may touch it.
	state processorState
}

// Option changes how a Supervisor behaves. Options are given to New.
type Option func(*Supervisor)

// WithPropagatePanic makes a panicking runnable crash the program instead of
// being recovered and restarted, so that tests see the panic where it
// happened.
func WithPropagatePanic() Option {
	return func(s *Supervisor) { s.propagatePanic = true }
}

// WithLogTree makes the supervisor log into lt instead of a log tree of its
// own. Runnables log under the DN "root" and below.
func WithLogTree(lt *logtree.LogTree) Option {
	return func(s *Supervisor) { s.lt = lt }
}

// WithBackoff sets the restart delay of a failing group: initial after the
// first death, doubling on each death after that up to max, each delay
// jittered by 20%. A delay below one millisecond is raised to one
// millisecond, and max is raised to initial if it is smaller.
func WithBackoff(initial, max time.Duration) Option {
	return func(s *Supervisor) {
		s.initialBackoff = initial
		s.maxBackoff = max
	}
}

// WithRootFatal makes the death of the root runnable end the tree instead of
// restarting the root: every runnable is cancelled, and once all have
// returned Wait returns the root's error. PID 1 uses this to reboot the
// machine rather than run on with a broken core.
func WithRootFatal() Option {
	return func(s *Supervisor) { s.rootFatal = true }
}

// WithRestartHook makes the supervisor call hook with the DN of every
// runnable it restarts, as it restarts it (for a metric of restarts). The
// hook runs on the supervisor's own goroutine: it must return at once.
func WithRestartHook(hook func(dn string)) Option {
	return func(s *Supervisor) { s.restartHook = hook }
}

// withCommandKillGrace sets how long RunCommand waits between SIGTERM and
// SIGKILL. Tests use it to avoid waiting for the default.
func withCommandKillGrace(d time.Duration) Option {
	return func(s *Supervisor) { s.commandKillGrace = d }
}

// New starts a supervision tree whose root runnable, named "root", is root.
// The tree runs until ctx is cancelled; Wait tells when it has stopped.
//
// New starts the processor goroutine, which lives until every runnable of
// the tree has returned and none is due to be restarted; Wait returns after
// it has gone.
func New(ctx context.Context, root Runnable, opts ...Option) *Supervisor {
	s := &Supervisor{
		initialBackoff:   defaultInitialBackoff,
		maxBackoff:       defaultMaxBackoff,
		commandKillGrace: defaultCommandKillGrace,
		ctx:              ctx,
		scheduleC:        make(chan *scheduleRequest),
		signalC:          make(chan *signalRequest),
		diedC:            make(chan *diedRequest),
		inspectC:         make(chan chan<- map[logtree.DN]nodeState),
		done:             make(chan struct{}),
	}
	for _, o := range opts {
		o(s)
	}
	if s.lt == nil {
		s.lt = logtree.New()
	}
	s.initialBackoff = max(s.initialBackoff, minBackoff)
	s.maxBackoff = max(s.maxBackoff, s.initialBackoff)
	go s.process(root)
	return s
}

// Wait blocks until every runnable of the tree has returned and none will be
// restarted. It returns the root's error when the tree ended because the
// root died under WithRootFatal, and nil otherwise.
func (s *Supervisor) Wait() error {
	<-s.done
	return s.err
}

// Done is closed when Wait would return.
func (s *Supervisor) Done() <-chan struct{} { return s.done }

// LogTree returns the log tree the supervisor and its runnables log into.
func (s *Supervisor) LogTree() *logtree.LogTree {
	return s.lt
}

// errStopped is returned by Run and RunGroup once the supervisor has
// stopped.
var errStopped = errors.New("supervisor has stopped")

// Run starts r as a child, named name, of the runnable whose context ctx is
// (or derives from). The child has a group of its own: its death restarts
// only itself and its children. The name must be unique among the caller's
// children, non-empty, and hold no dots, spaces or control characters.
func Run(ctx context.Context, name string, r Runnable) error {
	return RunGroup(ctx, map[string]Runnable{name: r})
}

// RunGroup starts runnables as children of the runnable whose context ctx is
// (or derives from), all in one group: when one of them dies, all of them
// are cancelled and, once every one has returned, restarted together. Names
// follow the rules of Run. Either every runnable is started or, on error,
// none is.
func RunGroup(ctx context.Context, runnables map[string]Runnable) error {
	n, err := fromContext(ctx)
	if err != nil {
		return err
	}
	if len(runnables) == 0 {
		return nil
	}
	for name, r := range runnables {
		if err := validateName(name); err != nil {
			return err
		}
		if r == nil {
			return fmt.Errorf("runnable %q is nil", name)
		}
	}
	req := &scheduleRequest{
		parent:    n,
		runnables: runnables,
		reply:     make(chan error, 1),
	}
	s := n.sup
	select {
	case s.scheduleC <- req:
	case <-s.done:
		return errStopped
	}
	return <-req.reply
}

// validateName checks a runnable's name: it becomes one part of a DN, so it
// must be non-empty and hold no dot; spaces and control characters would make
// log lines ambiguous, so they are refused too.
func validateName(name string) error {
	if name == "" {
		return errors.New("runnable name is empty")
	}
	if strings.Contains(name, ".") {
		return fmt.Errorf("runnable name %q contains a dot", name)
	}
	for _, c := range name {
		if unicode.IsSpace(c) || unicode.IsControl(c) {
			return fmt.Errorf("runnable name %q contains a space or control character", name)
		}
	}
	return nil
}

// Signal tells the supervisor about the runnable whose context ctx is (or
// derives from). See SignalHealthy and SignalDone. It panics when ctx does
// not come from a runnable, as that is a programming error with no other way
// to be reported.
func Signal(ctx context.Context, signal SignalType) {
	n := mustFromContext(ctx, "Signal")
	if signal != SignalHealthy && signal != SignalDone {
		panic(fmt.Sprintf("supervisor: Signal with unknown %v", signal))
	}
	s := n.sup
	select {
	case s.signalC <- &signalRequest{node: n, signal: signal}:
	case <-s.done:
	}
}

// Logger returns the leveled logger of the runnable whose context ctx is (or
// derives from). Its DN is the runnable's path, like "root.network.dhcp". It
// panics when ctx does not come from a runnable.
func Logger(ctx context.Context) logtree.LeveledLogger {
	n := mustFromContext(ctx, "Logger")
	return n.sup.lt.LeveledFor(n.dn)
}

// RawLogger returns a writer into the raw log of the runnable whose context
// ctx is (or derives from): every written line becomes one entry. The caller
// closes it to flush a last partial line. It panics when ctx does not come
// from a runnable.
func RawLogger(ctx context.Context) io.WriteCloser {
	n := mustFromContext(ctx, "RawLogger")
	return n.sup.lt.RawFor(n.dn)
}

// contextKey is the key under which a runnable's context holds its node.
type contextKey struct{}

// errNotRunnable is returned when a context does not come from a runnable.
var errNotRunnable = errors.New("context does not come from a supervised runnable")

// fromContext returns the node whose runnable ctx belongs to.
func fromContext(ctx context.Context) (*node, error) {
	n, ok := ctx.Value(contextKey{}).(*node)
	if !ok {
		return nil, errNotRunnable
	}
	return n, nil
}

// mustFromContext is fromContext for functions that have no error to return.
func mustFromContext(ctx context.Context, caller string) *node {
	n, err := fromContext(ctx)
	if err != nil {
		panic(fmt.Sprintf("supervisor: %s: %v", caller, err))
	}
	return n
}
