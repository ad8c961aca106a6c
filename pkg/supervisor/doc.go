// Package supervisor runs Cairn's long-lived work as a tree of runnables and
// keeps it running: a runnable that fails is restarted, with backoff,
// together with everything that depends on it, and nothing else.
//
// # Why a tree
//
// Work on a node nests. The network service runs a DHCP client per link;
// the role server runs a control plane that runs etcd and the curator. When
// a piece fails, what it started is usually meaningless without it (a DHCP
// client for a link the network service no longer manages), and what is
// beside it is usually fine (a broken curator says nothing about the DHCP
// client). A tree states exactly that: a runnable's children live inside
// its context and go down with it, its siblings do not notice. Where
// siblings truly depend on each other, RunGroup makes them one group that
// lives and dies together.
//
// The tree also names everything. A runnable's path, "root.network.dhcp",
// is its DN in the log tree (package logtree), so the logs of any part of
// the node, and the supervisor's notes on why it died and when it comes
// back, are one Read away.
//
// # Life of a runnable
//
// A runnable is a func(ctx) error. Run and RunGroup, called from a running
// runnable, start children of it. From then on:
//
//	Run, RunGroup or restart
//	   │
//	   ▼
//	┌─────┐ Signal(Healthy) ┌─────────┐ Signal(Done) ┌──────┐ return nil
//	│ NEW │────────────────▶│ HEALTHY │─────────────▶│ DONE │──────────▶ finished
//	└─────┘                 └─────────┘              └──────┘
//	   │ returns (error or nil), │ returns (error or nil), │ returns an
//	   │ panics, Signal(Done)    │ panics                  │ error, panics
//	   ▼                         ▼                         ▼
//	┌──────────────────────────────────────────────────────────┐
//	│ DEAD: its context is cancelled, which cancels its        │
//	│ subtree; its group siblings are cancelled (CANCELED)     │
//	└──────────────────────────────────────────────────────────┘
//	   │ every runnable of the group and below it has returned
//	   ▼
//	wait for the group's backoff delay, then start the whole group
//	again as new instances, which begin as NEW
//
// A runnable signals Healthy once it is doing its work; that resets the
// restart backoff of its group once every member of the group is healthy.
// Backoff starts at 100ms and doubles up to 30s unless WithBackoff says
// otherwise, with 20% jitter.
//
// Done means the runnable finished its work and will return nil. It is only
// allowed after Healthy; a runnable that signals Done first is killed. A
// runnable that returned nil after Done is never restarted on its own
// account, and its context stays live: the children it started keep
// running and are still restarted when they fail. Done does not take a
// runnable out of its group, though: if a group sibling dies, the whole
// group, the finished runnable too, runs again.
//
// A runnable that returns nil without having signalled Done is treated as
// dead: long-running work that stops without saying it finished is a bug.
// A panic is recovered, logged with its stack, and is a death too, unless
// WithPropagatePanic makes it crash the program (for tests).
//
// Cancelling the context given to New stops the whole tree; Wait returns
// once every runnable has returned. Under WithRootFatal the death of the
// root does the same instead of restarting the root, and Wait returns the
// root's error.
//
// # How it works
//
//	runnable goroutines                  processor goroutine
//	┌────────────────────┐            ┌──────────────────────────────┐
//	│ Run, RunGroup      │─scheduleC─▶│ owns the tree: nodes, their  │
//	│ Signal             │──signalC──▶│ states, groups, backoffs and │
//	│ return or panic    │───diedC───▶│ pending restarts             │
//	└────────────────────┘            │ timer: restarts due groups   │
//	          ▲                       └───────────────┬──────────────┘
//	          └─────── start: one per instance ───────┘
//
// One goroutine, the processor, owns all state of the tree; runnables talk
// to it only through channels, so there are no locks to get wrong. (A
// fourth channel lets tests ask it for the state of every runnable.) The
// goroutines are:
//
//   - the processor, started by New. It lives until no runnable runs and no
//     restart is pending, then closes the channel Wait waits on.
//   - one per running runnable instance, started by the processor. It runs
//     the runnable, reports its return (or panic) to the processor and
//     ends. The processor keeps listening while any of these lives.
//   - one per RunCommand call, which signals the process when the context
//     ends; it returns before RunCommand does.
//
// Contexts carry the tree: a runnable's context derives from its parent's,
// so cancelling a node cancels its whole subtree without the processor
// walking it, and Run, Signal and Logger find the calling runnable in it.
package supervisor
