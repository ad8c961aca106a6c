// Package event provides typed observable values: the way the parts of a
// Cairn node tell each other about state that changes over time, such as the
// node's address, its cluster membership or the roles it must run.
//
// A Value[T] holds the latest T. One side Sets it; any number of others each
// Watch it and call Get on their Watcher to receive the current value, then
// newer ones as they come, never the same Set twice and never an older one:
//
//	writer                          Value[netip.Addr]         readers
//	network ── Set(10.0.0.5) ──▶ ┌──────────────────┐ ◀─ Watcher ─ cluster
//	        ── Set(10.0.0.9) ──▶ │ latest: 10.0.0.9 │ ◀─ Watcher ─ roleserve
//	                             └──────────────────┘ ◀─ Watcher ─ kubernetes
//
//	cluster, reading all along:    Get 10.0.0.5, Get 10.0.0.9, Get blocks
//	roleserve, busy during both:   Get 10.0.0.9 (10.0.0.5 was stale, skipped)
//	kubernetes, started after:     Get 10.0.0.9 (the current value, at once)
//
// # Why not just channels?
//
// A channel carries a sequence of messages from one sender to one receiver.
// What the parts of a node share is different: a piece of state, whose
// latest version is all that matters. Built on channels, every producer
// would need a list of subscribers, a policy for slow ones and a way to hand
// the current state to subscribers that arrive late. Value does all of that
// once:
//
//   - Latest state, not a queue. A Watcher returns the newest value; the
//     ones Set while it was busy are skipped, because they are already out
//     of date. Nothing piles up.
//   - Many readers. Every Watch gets its own independent position; adding a
//     reader does not change the writer, and readers do not steal updates
//     from each other as receivers of one channel would.
//   - Slow readers never block the writer. Set returns at once whatever its
//     readers do, so a stuck consumer cannot stall the network stack or the
//     enrolment that publishes state.
//   - Late subscribers get the current value. The first Get of a new Watcher
//     returns what is there already, so a runnable restarted by the
//     supervisor picks up where the world is, without a replay.
//
// When a runnable must wait on several Values (or a Value and a timer) at
// once, Pipe copies one Value's updates into a channel for use in a select.
//
// # Implementations
//
// Value is an interface so that state may live in different places:
// package memory keeps it in process memory, for state within one node;
// other implementations may keep it in a cluster-wide store. All of them
// follow the contract of Value and Watcher described here, including
// Filter and BacklogOnly, which shape a single Get.
//
// # Sharing
//
// A Value hands the very T it was given to every Watcher. For a T that is,
// or holds, a pointer, slice or map, the writer must not modify the data
// after Set (Set a new copy instead), and readers must not modify what they
// Get.
package event
