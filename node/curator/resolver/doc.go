// Package resolver sends a node's calls to the curator that currently leads
// the cluster. It is a gRPC name resolver: a ClientConn built with Dial
// resolves to the leader's address, and follows the leader when it moves.
//
// Every curator forwards calls it cannot answer to the leader, so any
// curator would do; the resolver saves that extra hop on every call and,
// more importantly, moves a node's calls and streams away from a curator
// that went down. It is an optimisation for latency and resilience, never
// needed for correctness.
//
//	            endpoints: seeds (cluster directory) + curators seen
//	                                   │ SetCurators, leaders heard of
//	                                   ▼
//	Run (a runnable) ── GetCurrentLeader stream ──▶ any curator
//	  │  probe (child): a fresh GetCurrentLeader      │
//	  │  every few seconds; no answer ends the        │ leader host:port,
//	  │  session, and Run moves to the next endpoint  │ on every change
//	  ▼                                               ▼
//	leader known:   ClientConn addresses = [leader]
//	leader unknown, or gRPC asks to resolve again (the leader failed):
//	                ClientConn addresses = [leader, every other endpoint]
//	                (pick-first: a follower answers until a leader is known)
//
// A curator that names no leader for a few seconds (leaderlessFor) while
// other endpoints are known is passed over like one that failed: a curator
// whose node was just cut off names none until its etcd member has caught
// up, while the others name the leader all along.
//
// The probe exists because a curator whose machine died does not close its
// connections: its stream would stay silent for as long as TCP takes to give
// up, and the servers do not allow keepalive pings often enough to notice
// sooner.
//
// Callers see at most a short Unavailable while leadership moves: Dial
// gives every Cairn service a retry policy for UNAVAILABLE, and long-lived
// callers use deadlines (or WaitForReady) and call again.
package resolver
