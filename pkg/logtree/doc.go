// Package logtree is Cairn's log store: every component of a node logs into
// one LogTree, the console prints from it, and operators read from it.
//
// # Why a tree
//
// A node runs dozens of components under the supervision tree, each with its
// own name ("root.network.dhcp", "root.kubernetes.kubelet"). The tree of logs
// mirrors that naming, so that the questions people actually ask have a cheap
// answer: what did the DHCP client say (one node), what happened in
// networking (a node and everything below it), what happened on this machine
// (the root with children). Every node keeps its own bounded backlog, so a
// chatty component only ever pushes out its own history, never that of a
// quiet one next to it.
//
// # How data flows
//
//	loggers                 LogTree, one node per DN          readers
//
//	LeveledFor("a.b") ──┐   "" (root)
//	                    │    └─ a      [ring]  ──────▶ Read("a", WithChildren(),
//	RawFor("a.c") ──────┤        ├─ a.b  [ring]           WithBacklog(n)):
//	  line splitter     │        └─ a.c  [ring]           rings of a, a.b, a.c
//	                    │                                 merged, newest n
//	                    ▼
//	      append: stamp time and sequence number,
//	      store in the node's ring, offer to the   ──▶ Read("a.b", WithStream()):
//	      readers of the node and to the                bounded channel; when
//	      WithChildren readers of its ancestors         full, drop and count
//	                                               ──▶ Console(w): a stream of
//	                                                    the root and children,
//	                                                    written to w by its
//	                                                    own goroutine
//
// Entries are stamped and numbered under the tree's lock, so the merged
// backlog of several nodes is in the order the entries were logged, and a
// reader that asks for a backlog and a stream gets every entry exactly once
// across the two, unless it falls behind (see below).
//
// # Never blocking the loggers
//
// Logging must not stall because someone reads slowly: a blocked logger is a
// blocked component. Storing an entry is a ring slot write; handing it to a
// streaming reader is a non-blocking send into that reader's buffered
// channel. A reader that lets its buffer fill up loses entries instead,
// counted in LogReader.Dropped and announced by a WARNING entry in its
// stream once there is room again.
//
// # Goroutines
//
// The package starts one goroutine per Console, which lives until the stop
// function Console returned is called; stop waits for it to exit. Nothing
// else runs in the background: loggers do their work on the caller's
// goroutine, and streams are fed by the loggers' non-blocking sends.
package logtree
