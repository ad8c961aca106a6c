// Package sntp speaks the Simple Network Time Protocol: a client that asks
// one server for the time and measures how far the local clock is off
// (RFC 4330, and the client mode of NTPv4, RFC 5905), and a server that
// answers such clients with the time of its own clock.
//
// It is the wire protocol only. What to do with an answer (which servers
// to ask, how often, whether to step or slew the clock) is the caller's
// policy: node/timesync for a node, the test network of the harness for a
// server.
//
// # One exchange
//
// The client sends a 48-byte request over UDP and reads one 48-byte
// answer. Four timestamps make the measurement:
//
//	 client                         server
//	   │ T1 send ──── request ────▶ T2 receive
//	   │                              │
//	   │ T4 receive ◀── answer ─────  T3 send
//	   ▼                              ▼
//
//	offset = ((T2 - T1) + (T3 - T4)) / 2   how far the server is ahead
//	delay  =  (T4 - T1) - (T3 - T2)        the network's round trip
//
// T1 and T4 never leave the client: the request carries a random 64-bit
// nonce where NTP puts T1 (as the NTP data minimization draft
// recommends), which the server echoes as its origin timestamp. An
// answer whose origin is not the nonce is not an answer to this request
// and is ignored, so an attacker off the path has to guess 64 bits to
// have a forged answer accepted. T4 is T1 plus the elapsed time of Go's
// monotonic clock, so a step of the local clock during the exchange does
// not distort the result.
//
// # What it does not do
//
// Nothing is authenticated: anyone on the path between client and server
// can answer with any time (NTS, RFC 8915, would fix that and is not
// implemented). The client does not filter or combine samples of several
// servers as full NTP does; one good answer is one measurement.
//
// # Timestamps and eras
//
// NTP counts seconds since 1900 in 32 bits, which wrap in February 2036.
// As RFC 4330 section 3 suggests, a timestamp whose top bit is clear is
// read as after the wrap, so timestamps are understood from 1968 to 2104.
package sntp
