package rpc

import (
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
)

// The limits every gRPC server of a node (the curator, node management)
// sets on every caller, authenticated or not. Cairn's messages are small
// (node records, certificates, tickets, batches of log lines) and its
// callers few (nodes, the owner's cairnctl, curators forwarding to the
// leader), so the limits sit far below gRPC's defaults, which are sized
// for anything at all: unlimited streams, 2 GiB messages, two hours
// before a silent peer is noticed.
const (
	// maxConcurrentStreams bounds the calls in flight on one connection.
	// A node keeps about five open (two Watches, GetCurrentLeader, a
	// heartbeat, a status push), cairnctl a few. The widest user is a
	// follower forwarding its callers' calls to the leader over its one
	// connection: nodes reach the leader directly through the resolver,
	// so these are the streams of nodes whose resolver has not yet
	// followed an election; 1024 covers 500 nodes' two Watches each. A
	// client over the bound waits for a stream to end (gRPC queues it).
	maxConcurrentStreams = 1024
	// maxRecvMsgSize bounds one request. The largest is a GetNodes filter
	// naming nodes (about 26 bytes per ID, so some 10,000 IDs); keys,
	// tickets and statuses are under a kilobyte. It also bounds what one
	// unauthenticated stream can make the server buffer at once.
	maxRecvMsgSize = 256 << 10
	// maxSendMsgSize bounds one response. The largest are a Logs batch of
	// node management (at most 256 KiB of entries plus the one that
	// overflowed it, see node/nodemanagement), a Watch backlog event of
	// 100 nodes and GetNodes of a whole cluster (a few hundred bytes per
	// node). 4 MiB is what gRPC clients accept by default: a larger
	// message would be refused at the other end anyway, so the server
	// refuses to build it and says so.
	maxSendMsgSize = 4 << 20
	// keepaliveMinTime is the shortest interval at which a client may
	// ping; more often, twice, and the server hangs up (too_many_pings).
	// gRPC clients cannot ping more often than every 10 s, so every
	// client within its own minimum passes, while a client flooding the
	// server with pings is cut off.
	keepaliveMinTime = 5 * time.Second
	// keepalivePermitWithoutStream lets clients ping on connections with
	// no call in flight: a node keeps its connection to the curator
	// between heartbeats and may check that it still works. The pings are
	// bounded by keepaliveMinTime all the same.
	keepalivePermitWithoutStream = true
	// maxConnectionIdle closes a connection that has had no call in
	// flight for this long: one left open by a client that went away,
	// or opened and never used. It is far longer than the intervals of
	// Cairn's own callers (heartbeats every 5 s, approval polls), whose
	// connections are never idle that long, and a client whose idle
	// connection was closed connects again on its next call.
	maxConnectionIdle = 2 * time.Minute
	// keepaliveTime is how long a connection may be silent before the
	// server pings the client, and keepaliveTimeout how long the server
	// then waits for the answer before it closes the connection. A node
	// that lost power leaves its Watch streams open on the leader, each
	// holding one of the node's Watch slots (node/curator), until this
	// notices: within 50 s instead of TCP's many minutes.
	keepaliveTime    = 30 * time.Second
	keepaliveTimeout = 20 * time.Second
	// handshakeTimeout bounds a new connection's TLS handshake and HTTP/2
	// preface. Both take milliseconds between Cairn's nodes, even under
	// emulation; a client that connects and says nothing is holding a
	// connection and a goroutine, and is cut off after this.
	handshakeTimeout = 10 * time.Second
)

// serverLimits are the limits a Server applies. NewServer uses
// defaultLimits; tests shrink them to see each one act.
type serverLimits struct {
	maxConcurrentStreams uint32
	maxRecvMsgSize       int
	maxSendMsgSize       int
	enforcement          keepalive.EnforcementPolicy
	keepalive            keepalive.ServerParameters
	handshakeTimeout     time.Duration
}

// defaultLimits are the limits above.
var defaultLimits = serverLimits{
	maxConcurrentStreams: maxConcurrentStreams,
	maxRecvMsgSize:       maxRecvMsgSize,
	maxSendMsgSize:       maxSendMsgSize,
	enforcement: keepalive.EnforcementPolicy{
		MinTime:             keepaliveMinTime,
		PermitWithoutStream: keepalivePermitWithoutStream,
	},
	keepalive: keepalive.ServerParameters{
		MaxConnectionIdle: maxConnectionIdle,
		Time:              keepaliveTime,
		Timeout:           keepaliveTimeout,
	},
	handshakeTimeout: handshakeTimeout,
}

// options are the gRPC server options that set l.
func (l serverLimits) options() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.MaxConcurrentStreams(l.maxConcurrentStreams),
		grpc.MaxRecvMsgSize(l.maxRecvMsgSize),
		grpc.MaxSendMsgSize(l.maxSendMsgSize),
		grpc.KeepaliveEnforcementPolicy(l.enforcement),
		grpc.KeepaliveParams(l.keepalive),
		grpc.ConnectionTimeout(l.handshakeTimeout),
	}
}
