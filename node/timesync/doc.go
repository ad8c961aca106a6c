// Package timesync keeps the node's clock right with NTP servers, and says
// how far the clock can be trusted: certificates have bounded lifetimes,
// and a node that issues or checks one with a wrong clock gets it wrong.
//
//	node/network (DHCP option 42)
//	     │ Config.Servers: Value[[]netip.Addr]
//	     ▼
//	┌─────────────────────────────────────┐   SNTP over UDP 123
//	│ Service.Run: asks the servers, in   │◀─────────────────▶ NTP servers
//	│ order, and judges their answers     │   (pkg/sntp)
//	└───────┬──────────────────────┬──────┘
//	        │ step or slew         │ Config.State: Value[State]
//	        ▼                      ▼
//	   system clock         roleserve statuspush (NodeStatus.clock),
//	   (adjtimex)           Clock.Check (code about to issue or accept
//	                        a certificate)
//
// The servers come from the network's DHCP lease today. The service knows
// only a list of addresses, not where it came from: servers named by the
// cluster configuration, when there are any, are added by giving it a
// Value that holds both lists, most preferred first.
//
// # Asking
//
// The service asks the first server of the list; when it fails (no
// answer within five seconds, a kiss-o'-death, an unsynchronized or
// nonsensical answer), the next, and so on. A server that answers DENY or
// RSTR is not asked again until the list changes. When a server answers,
// the next query is 64 seconds later, and the wait doubles after every
// answer that did not need a step, up to 1024 seconds: NTP's default poll
// range. When no server answers, the service waits 16 seconds (RFC 4330
// forbids asking a server more often than every 15), doubling up to 1024
// seconds, with 10% jitter, before it tries the list again. A new list
// of servers is asked at once.
//
// # Correcting the clock
//
// An answer's offset is corrected in one of two ways:
//
//   - stepped (adjtimex ADJ_SETOFFSET, which moves the clock by the offset
//     in one atomic call) when it is the first answer of this boot and
//     the offset is more than stepThreshold (128 ms), or any answer with
//     an offset of more than MaxOffset (one second);
//   - slewed otherwise (adjtimex ADJ_OFFSET_SINGLESHOT, as adjtime(3)
//     does): the kernel runs the clock up to 0.05% fast or slow until the
//     offset is gone, so time never jumps and never runs backwards. A
//     second takes about half an hour, 128 ms about four minutes.
//
// Why step at all: at boot the clock is whatever the firmware's RTC said,
// possibly hours or years off, and slewing an hour would take 83 days;
// while the node boots, few things hold timestamps that a step could
// confuse. Later, a step is reserved for offsets that slewing would leave
// standing for more than half an hour (a virtual machine that was paused,
// a clock someone set by hand), because a certificate checked against a
// clock a minute off is worse than a jump in the logs. Why not a full NTP
// discipline (frequency correction, sample filters, several servers
// combined): nodes need their clock right to a second for certificates,
// not to a microsecond, and a slew per poll holds a virtual machine's
// clock within milliseconds.
//
// # Known wrong
//
// State.Sync is one of:
//
//   - Unsynchronized: no server has answered this boot (yet). Nothing is
//     known against the clock, and nothing for it.
//   - Synchronized: a server answered, and the clock was corrected to its
//     time; Offset is how far off the clock was then. The state stays
//     Synchronized when later queries fail: the clock keeps running from
//     a good time, and LastSync says how long ago that was.
//   - KnownWrong: the clock is known to be wrong, because it reads
//     earlier than Floor (a date compiled into this package: no Cairn
//     build predates it, so neither does a right clock), or because a
//     server's answer found it more than MaxOffset off and correcting it
//     failed. Reason says which.
//
// Clock.Check, which code about to issue or accept a certificate calls,
// fails while the clock is KnownWrong, and when it reads before Floor
// even where the service has not run yet. It does not fail while the
// clock is merely Unsynchronized: a node whose network names no NTP
// server still works, trusting its RTC.
//
// # What it does not protect against
//
// SNTP is not authenticated (see pkg/sntp): whoever is on the path to the
// servers, or controls the DHCP server, can set the node's clock to any
// time after Floor. The service refuses only answers before Floor.
package timesync
