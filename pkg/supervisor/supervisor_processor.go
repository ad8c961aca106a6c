package supervisor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"cairn.dev/cairn/pkg/logtree"
)

// processorState is the tree as the processor goroutine sees it. Only that
// goroutine reads or writes it.
type processorState struct {
	root      *node
	rootGroup *group
	// running counts runnables whose goroutine has not been reported as
	// returned yet.
	running int
	// pending holds the groups with a restart scheduled.
	pending map[*group]struct{}
	// fatalErr is the root's death reason under WithRootFatal.
	fatalErr error
}

// scheduleRequest asks the processor to start runnables as one group of
// children of parent. The processor answers on reply, which has room for
// the answer.
type scheduleRequest struct {
	parent    *node
	runnables map[string]Runnable
	reply     chan error
}

// signalRequest carries a Signal call.
type signalRequest struct {
	node   *node
	signal SignalType
}

// diedRequest reports that the runnable of node returned err.
type diedRequest struct {
	node *node
	err  error
}

// process is the processor goroutine: it starts the root and then serves
// requests and due restarts until every runnable has returned and nothing
// is due to be restarted. Then it closes s.done and returns.
func (s *Supervisor) process(root Runnable) {
	defer close(s.done)
	st := &s.state
	st.pending = map[*group]struct{}{}
	st.rootGroup = s.newGroup(nil)
	st.root = s.newNode(st.rootGroup, rootName, root)
	st.rootGroup.members = []*node{st.root}
	s.start(st.root)

	timer := time.NewTimer(time.Hour)
	timer.Stop()
	ctxDone := s.ctx.Done()
	for {
		s.scheduleRestarts()
		next, ok := s.nextRestart()
		if !ok && st.running == 0 {
			s.err = st.fatalErr
			return
		}
		var timerC <-chan time.Time
		if ok {
			timer.Reset(time.Until(next))
			timerC = timer.C
		}
		select {
		case r := <-s.scheduleC:
			r.reply <- s.processSchedule(r)
		case r := <-s.signalC:
			s.processSignal(r)
		case r := <-s.diedC:
			s.processDied(r)
		case reply := <-s.inspectC:
			reply <- s.states()
		case <-timerC:
			s.restartDue(time.Now())
		case <-ctxDone:
			// Nothing to do but look again: pending restarts are
			// now void, and the runnables are on their way out.
			ctxDone = nil
		}
		timer.Stop()
	}
}

// start launches n's goroutine.
func (s *Supervisor) start(n *node) {
	n.running = true
	s.state.running++
	go s.runNode(n)
}

// processSchedule starts the runnables of r as a new group, or says why not.
func (s *Supervisor) processSchedule(r *scheduleRequest) error {
	p := r.parent
	if p.ctx.Err() != nil {
		return fmt.Errorf("cannot start children of %s, it is stopping: %w", p.dn, context.Cause(p.ctx))
	}
	names := sortedNames(r.runnables)
	for _, name := range names {
		if _, ok := p.children[name]; ok {
			return fmt.Errorf("%s already has a child named %q", p.dn, name)
		}
	}
	g := s.newGroup(p)
	for _, name := range names {
		n := s.newNode(g, name, r.runnables[name])
		g.members = append(g.members, n)
		p.children[name] = n
	}
	p.groups = append(p.groups, g)
	for _, n := range g.members {
		s.start(n)
	}
	return nil
}

// processSignal applies a Signal call. Signals from runnables being stopped
// are dropped: their state no longer matters.
func (s *Supervisor) processSignal(r *signalRequest) {
	n := r.node
	if n.ctx.Err() != nil {
		return
	}
	switch r.signal {
	case SignalHealthy:
		switch n.state {
		case stateNew:
			n.state = stateHealthy
			if n.group.allHealthy() {
				n.group.backoff.Reset()
			}
		case stateDone:
			n.log().Warning("signalled Healthy after Done, ignored")
		}
	case SignalDone:
		switch n.state {
		case stateNew:
			n.log().Errorf("died: %v", errDoneBeforeHealthy)
			s.kill(n, errDoneBeforeHealthy)
		case stateHealthy:
			n.state = stateDone
			if n.group.allHealthy() {
				n.group.backoff.Reset()
			}
		}
	}
}

// processDied handles the return of a runnable.
func (s *Supervisor) processDied(r *diedRequest) {
	n, err := r.node, r.err
	n.running = false
	s.state.running--
	switch {
	case n.state == stateDead:
		// Killed earlier for breaking the signalling rules; the reason
		// was logged then.
	case n.state == stateDone && err == nil:
		// Finished as promised. Its context stays live, so that its
		// children keep running.
		if n.ctx.Err() == nil {
			n.log().Info("finished")
		}
	case n.ctx.Err() != nil:
		n.state = stateCanceled
		if err != nil && !errors.Is(err, context.Canceled) {
			n.log().Infof("stopped after cancellation: %v", err)
		}
	default:
		switch {
		case err == nil:
			err = errReturnedNil
			n.log().Errorf("died: %v", err)
		case errors.Is(err, ErrRestart):
			n.log().Infof("restarting on purpose: %v", err)
		default:
			n.log().Errorf("died: %v", err)
		}
		s.kill(n, err)
	}
}

// kill marks n dead for err and cancels it, its subtree and its group
// siblings. The group is restarted by scheduleRestarts once all of them
// have returned.
func (s *Supervisor) kill(n *node, err error) {
	n.state = stateDead
	n.err = err
	n.cancel(fmt.Errorf("%s died: %w", n.dn, err))
	for _, m := range n.group.members {
		if m == n || m.state == stateDead {
			continue
		}
		m.state = stateCanceled
		m.cancel(fmt.Errorf("group sibling %s died: %w", n.dn, err))
	}
	if n == s.state.root && s.rootFatal && s.state.fatalErr == nil {
		s.state.fatalErr = fmt.Errorf("root runnable died: %w", err)
	}
}

// scheduleRestarts finds every group that needs a restart and is ready for
// it (its parent lives and nothing in it runs any more), and schedules its
// restart after the group's next backoff delay.
func (s *Supervisor) scheduleRestarts() {
	s.scanGroup(s.state.rootGroup)
}

// scanGroup is scheduleRestarts for g and every group below it.
func (s *Supervisor) scanGroup(g *group) {
	if g.restartAt.IsZero() && g.needsRestart() && g.parentAlive(s) && !g.anyRunning() {
		if g.parent == nil && s.rootFatal {
			// The tree ends instead; process sees nothing runs.
			return
		}
		delay := g.backoff.NextBackOff()
		g.restartAt = time.Now().Add(delay)
		s.state.pending[g] = struct{}{}
		for _, m := range g.members {
			if m.state == stateDead {
				m.log().Infof("restarting in %v", delay)
			} else {
				m.log().Infof("restarting in %v with its group (%s)", delay, g.names())
			}
		}
	}
	for _, m := range g.members {
		for _, cg := range m.groups {
			s.scanGroup(cg)
		}
	}
}

// nextRestart returns the earliest scheduled restart that is still valid,
// dropping those voided by their parent stopping.
func (s *Supervisor) nextRestart() (time.Time, bool) {
	var next time.Time
	for g := range s.state.pending {
		if !g.parentAlive(s) {
			delete(s.state.pending, g)
			continue
		}
		if next.IsZero() || g.restartAt.Before(next) {
			next = g.restartAt
		}
	}
	return next, !next.IsZero()
}

// restartDue restarts every pending group whose time has come.
func (s *Supervisor) restartDue(now time.Time) {
	for g := range s.state.pending {
		if g.restartAt.After(now) {
			continue
		}
		delete(s.state.pending, g)
		g.restartAt = time.Time{}
		if g.parentAlive(s) {
			s.restart(g)
		}
	}
}

// restart replaces every member of g with a new instance and starts them.
func (s *Supervisor) restart(g *group) {
	for i, old := range g.members {
		n := s.newNode(g, old.name, old.runnable)
		g.members[i] = n
		if g.parent == nil {
			s.state.root = n
		} else {
			g.parent.children[n.name] = n
		}
	}
	for _, n := range g.members {
		if s.restartHook != nil {
			s.restartHook(string(n.dn))
		}
		s.start(n)
	}
}

// states returns the state of every current node by DN.
func (s *Supervisor) states() map[logtree.DN]nodeState {
	out := map[logtree.DN]nodeState{}
	var walk func(g *group)
	walk = func(g *group) {
		for _, m := range g.members {
			out[m.dn] = m.state
			for _, cg := range m.groups {
				walk(cg)
			}
		}
	}
	walk(s.state.rootGroup)
	return out
}

// inspect returns the state of every current node by DN, as the processor
// sees it, or nil once the supervisor has stopped. For tests and debugging.
func (s *Supervisor) inspect() map[logtree.DN]nodeState {
	reply := make(chan map[logtree.DN]nodeState, 1)
	select {
	case s.inspectC <- reply:
		return <-reply
	case <-s.done:
		return nil
	}
}
