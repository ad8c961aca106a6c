package supervisor

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v4"

	"cairn.dev/cairn/pkg/logtree"
)

// nodeState is where a node is in its life. See the package documentation
// for the transitions.
type nodeState int

const (
	// stateNew: started, not yet healthy.
	stateNew nodeState = iota
	// stateHealthy: signalled Healthy.
	stateHealthy
	// stateDone: signalled Done; it may have returned nil since.
	stateDone
	// stateDead: died (returned an error, returned nil without Done,
	// panicked, or broke the signalling rules). Its group is restarted
	// once everything in it has returned.
	stateDead
	// stateCanceled: its context was cancelled by the supervisor because a
	// group sibling died, or by an ancestor stopping.
	stateCanceled
)

func (s nodeState) String() string {
	switch s {
	case stateNew:
		return "NEW"
	case stateHealthy:
		return "HEALTHY"
	case stateDone:
		return "DONE"
	case stateDead:
		return "DEAD"
	case stateCanceled:
		return "CANCELED"
	}
	return fmt.Sprintf("nodeState(%d)", int(s))
}

// node is one instance of a runnable in the tree. A restart replaces the
// node with a new instance of the same name, runnable and group; the old
// instance, always cancelled by then, is dropped from the tree.
//
// The fields above the line never change after newNode and may be read from
// any goroutine. The fields below belong to the processor goroutine.
type node struct {
	sup      *Supervisor
	name     string
	dn       logtree.DN
	parent   *node  // nil for the root
	group    *group // the group this node is a member of
	runnable Runnable
	ctx      context.Context
	cancel   context.CancelCauseFunc

	// ---- owned by the processor ----

	state nodeState
	// running is true between the start of the runnable's goroutine and
	// the processor receiving its return.
	running bool
	// err is why the node died, when state is stateDead.
	err error
	// children of this instance by name, and the groups they form, in
	// the order they were started.
	children map[string]*node
	groups   []*group
}

// group is a set of sibling nodes that live and die together. A node
// started with Run is a group of one. The group outlives the instances of
// its members, and so keeps their common restart backoff.
type group struct {
	parent  *node   // nil for the root's group
	members []*node // the current instances, ordered by name
	backoff *backoff.ExponentialBackOff
	// restartAt is when the group is due to be restarted; zero when no
	// restart is scheduled.
	restartAt time.Time
}

// newGroup returns an empty group under parent (nil for the root's group).
func (s *Supervisor) newGroup(parent *node) *group {
	bo := &backoff.ExponentialBackOff{
		InitialInterval:     s.initialBackoff,
		RandomizationFactor: 0.2,
		Multiplier:          2,
		MaxInterval:         s.maxBackoff,
		MaxElapsedTime:      0, // never give up
		Stop:                backoff.Stop,
		Clock:               backoff.SystemClock,
	}
	bo.Reset()
	return &group{parent: parent, backoff: bo}
}

// newNode returns a new, not yet started, instance of runnable r named name
// in group g.
func (s *Supervisor) newNode(g *group, name string, r Runnable) *node {
	n := &node{
		sup:      s,
		name:     name,
		dn:       logtree.DN(name),
		parent:   g.parent,
		group:    g,
		runnable: r,
		children: map[string]*node{},
	}
	base := s.ctx
	if n.parent != nil {
		base = n.parent.ctx
		n.dn = n.parent.dn + "." + logtree.DN(name)
	}
	ctx, cancel := context.WithCancelCause(base)
	n.ctx = context.WithValue(ctx, contextKey{}, n)
	n.cancel = cancel
	return n
}

// log returns the node's leveled logger, for the supervisor's own notes
// about it.
func (n *node) log() logtree.LeveledLogger {
	return n.sup.lt.LeveledFor(n.dn)
}

// parentAlive reports whether the context the group's members derive from
// is still live: if not, the group is going away with its parent and must
// not be restarted.
func (g *group) parentAlive(s *Supervisor) bool {
	if g.parent == nil {
		return s.ctx.Err() == nil
	}
	return g.parent.ctx.Err() == nil
}

// needsRestart reports whether a member of g died or was cancelled for the
// death of a sibling.
func (g *group) needsRestart() bool {
	for _, m := range g.members {
		if m.state == stateDead || m.state == stateCanceled {
			return true
		}
	}
	return false
}

// allHealthy reports whether every member of g is healthy or done.
func (g *group) allHealthy() bool {
	for _, m := range g.members {
		if m.state != stateHealthy && m.state != stateDone {
			return false
		}
	}
	return true
}

// anyRunning reports whether a runnable in g or below it has not returned
// yet.
func (g *group) anyRunning() bool {
	for _, m := range g.members {
		if m.subtreeRunning() {
			return true
		}
	}
	return false
}

// subtreeRunning reports whether n or any of its descendants has not
// returned yet.
func (n *node) subtreeRunning() bool {
	if n.running {
		return true
	}
	for _, g := range n.groups {
		if g.anyRunning() {
			return true
		}
	}
	return false
}

// names returns the DNs of the group's members, for logs.
func (g *group) names() string {
	dns := make([]string, len(g.members))
	for i, m := range g.members {
		dns[i] = string(m.dn)
	}
	return strings.Join(dns, ", ")
}

// sortedNames returns the keys of runnables in order, so that groups start
// and log in a stable order.
func sortedNames(runnables map[string]Runnable) []string {
	names := make([]string, 0, len(runnables))
	for name := range runnables {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// errReturnedNil is the death reason of a runnable that returned nil
// without signalling Done.
var errReturnedNil = errors.New("returned nil without signalling Done")

// ErrRestart, wrapped in the error a runnable returns, says that the
// runnable ends on purpose to be started again, typically because an input
// it was started with changed. The supervisor treats it as any death
// (subtree and group cancelled, restart after the backoff) but logs it at
// INFO, not as a failure.
var ErrRestart = errors.New("restart requested")

// errDoneBeforeHealthy is the death reason of a runnable that signalled
// Done without having signalled Healthy.
var errDoneBeforeHealthy = errors.New("signalled Done before Healthy")

// panicError is the death reason of a runnable that panicked.
type panicError struct {
	value any
	stack []byte
}

func (e *panicError) Error() string {
	return fmt.Sprintf("panic: %v\n%s", e.value, e.stack)
}

// Unwrap returns the panic's value when it is an error.
func (e *panicError) Unwrap() error {
	err, _ := e.value.(error)
	return err
}

// runNode is the body of a runnable's goroutine. The goroutine lives from
// the processor starting the node until the runnable returns; its last act
// is to report the return to the processor, which is always listening while
// a runnable runs.
func (s *Supervisor) runNode(n *node) {
	err := s.call(n)
	s.diedC <- &diedRequest{node: n, err: err}
}

// call runs the node's runnable, turning a panic into a panicError unless
// panics are to propagate.
func (s *Supervisor) call(n *node) (err error) {
	if !s.propagatePanic {
		defer func() {
			if v := recover(); v != nil {
				err = &panicError{value: v, stack: debug.Stack()}
			}
		}()
	}
	return n.runnable(n.ctx)
}
