package rpc

import (
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
)

// How a node's long-lived connections to curators reconnect. gRPC's
// defaults suit a client of a distant service: the delay between attempts
// grows to two minutes, and one attempt may take 20 s. A node cut off from
// its curators for half a minute (a partition, the curators rebooting)
// would then find them again up to 17 s after they were back, with an
// attempt begun in the cut still waiting on its unanswered SYN. Curators
// are a handful of machines on the cluster's own network, where an attempt
// to a curator that is down costs nothing, so the delay stays short.
const (
	// reconnectBase is the delay after the first failed attempt; each
	// failure after it multiplies the delay by 1.6, up to reconnectMax,
	// jittered by 20 %.
	reconnectBase = 250 * time.Millisecond
	reconnectMax  = 2 * time.Second
	// connectTimeout bounds one attempt: a TCP connection and the TLS
	// handshake, which takes well under a second even on an emulated,
	// busy node. An attempt whose SYN went into a partition gives up
	// then, and the next one starts afresh.
	connectTimeout = 5 * time.Second
)

// ReconnectQuickly is the dial option of a node's long-lived connections
// to curators: the role server's connection to the leader, a follower
// curator's to the leader, the resolver's to the curator it follows.
func ReconnectQuickly() grpc.DialOption {
	return grpc.WithConnectParams(grpc.ConnectParams{
		Backoff: backoff.Config{
			BaseDelay:  reconnectBase,
			Multiplier: 1.6,
			Jitter:     0.2,
			MaxDelay:   reconnectMax,
		},
		MinConnectTimeout: connectTimeout,
	})
}
