// Package network gives the node its network: loopback and Ethernet links
// up, an IPv4 address by DHCP or from the operator's static configuration,
// a default route, resolvers in resolv.conf and the hostname. It publishes
// the node's external address on an event.Value, which is how the rest of
// the node learns that it can talk to the cluster, and on which address;
// and, on another, the NTP servers the DHCP lease names (option 42), which
// node/timesync keeps the clock with.
//
// # Workers
//
// Service.Run is a supervisor runnable. It sets the hostname and the TCP
// settings of the namespace (sysctl.go: lost connections fail fast enough
// to follow a healed partition), and starts two workers as its children,
// which talk through one in-memory Value:
//
//	             netlink link updates
//	                     │
//	                     ▼
//	┌─────────────────────────────────────┐
//	│ links: sets lo and Ethernet links   │
//	│ up, tracks which have carrier       │
//	└──────────────────┬──────────────────┘
//	                   │ carrier: Value[[]link]
//	         ┌─────────┴──────────┐  (one of the two)
//	         ▼                    ▼
//	┌─────────────────┐  ┌─────────────────┐  address, route,
//	│ dhcp: DHCPv4 on │  │ static: applies │─ resolv.conf ─▶ kernel, files
//	│ the first link  │  │ NetworkConfig   │
//	│ with carrier    │  │ once, then done │
//	└────────┬────────┘  └────────┬────────┘
//	         └─────────┬──────────┘
//	                   ▼
//	     Config.ExternalAddress: Value[netip.Prefix] ─▶ other services
//	     Config.NTPServers: Value[[]netip.Addr]      ─▶ node/timesync
//
// Ethernet links are set up whether or not they have carrier, since a
// driver only reports carrier on a link that is up; a link that gains
// carrier later shows up as a link update and is then used. Every worker
// opens its own netlink handle in Config.Namespace, and the DHCP client
// opens its sockets on a thread switched into that namespace, so the
// service can run in a network namespace other than the process's (which
// is how the tests run it) without touching global state.
//
// # DHCP client
//
// The client keeps one lease on one link, following RFC 2131. The
// message exchanges are nclient4's; the states, timers and what happens
// to the system on each transition are ours:
//
//	        start, or lease lost (after backoff)
//	                     │
//	                     ▼
//	┌───────────────────────────────────────────────┐
//	│ INIT: DISCOVER, OFFER, REQUEST, ACK           │◀─┐ no usable ACK:
//	│ (broadcast, raw socket)                       │──┘ backoff 1s..30s
//	└──────────────────────┬────────────────────────┘
//	                       │ ACK: add address (lifetime = lease),
//	                       │ default route via router, resolv.conf,
//	                       ▼ publish address and NTP servers
//	┌───────────────────────────────────────────────┐◀──────────────┐
//	│ BOUND                                         │               │
//	└──────────────────────┬────────────────────────┘               │
//	                       │ T1                                     │
//	                       ▼                                        │ ACK:
//	┌───────────────────────────────────────────────┐  refresh      │ extend
//	│ RENEWING: REQUEST by unicast to the server    │─ lifetimes, ──┤
//	│ from the leased address                       │  publish if   │
//	└───────┬──────────────────────────────┬────────┘  changed      │
//	        │ T2, no answer                │ NAK                    │
//	        ▼                              │                        │
//	┌───────────────────────────────┐      │                        │
//	│ REBINDING: REQUEST broadcast  │──────┼────────────────────────┘
//	│ to any server                 │      │
//	└───────┬───────────────────────┘      │
//	        │ expiry, or NAK               │
//	        ▼                              ▼
//	   lease lost: remove route and address, publish the zero Prefix
//	   and no NTP servers, back to INIT
//
// Requests in RENEWING and REBINDING start a new window after half the
// time left in the phase, but not more often than once a minute unless
// less than that is left (RFC 2131, section 4.4.5); within a window, and
// within one INIT exchange, an unanswered message is sent again after 1s,
// 2s and 4s. Every transition is logged with its reason. The raw socket
// is open only in INIT and REBINDING: it receives a copy of every IPv4
// packet of the link, which nclient4 reads and drops.
//
// # Static configuration
//
// A NetworkConfig with a static method is checked as a whole before
// anything is applied; a bad value is an error naming it. The addresses
// go on the link with the given hardware address, or on the first
// Ethernet link with carrier, and the first address is published.
package network
