package curator

import (
	"context"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/node/rpc"
	"cairn.dev/cairn/proto/api"
)

// heartbeats is the leader's memory of when it last heard from each node.
// It is memory only: a new leader starts with none, and nodes show a zero
// last heartbeat until they beat to it (every interval).
type heartbeats struct {
	mu   sync.Mutex
	seen map[string]time.Time
}

// beat records that node id was heard from now.
func (h *heartbeats) beat(id string, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.seen == nil {
		h.seen = make(map[string]time.Time)
	}
	h.seen[id] = now
}

// last says when node id was last heard from.
func (h *heartbeats) last(id string) (time.Time, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	t, ok := h.seen[id]
	return t, ok
}

// forget clears the memory, when this curator starts to lead.
func (h *heartbeats) forget() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seen = nil
}

// Heartbeat implements Curator.Heartbeat.
func (a nodeAPI) Heartbeat(ctx context.Context, _ *api.HeartbeatRequest) (*api.HeartbeatResponse, error) {
	p, err := nodePeer(ctx)
	if err != nil {
		return nil, err
	}
	a.heartbeats.beat(p.NodeID, time.Now())
	return &api.HeartbeatResponse{IntervalMillis: a.opts.heartbeatInterval.Milliseconds()}, nil
}

// nodePeer returns the calling node, which the method's class NODE made
// sure of.
func nodePeer(ctx context.Context) (identity.Peer, error) {
	p, ok := rpc.PeerFromContext(ctx)
	if !ok || p.Kind != identity.PeerNode {
		return identity.Peer{}, status.Error(codes.Unauthenticated, "the caller is not a node")
	}
	return p, nil
}

// selfSignedPeer returns the key the caller proved to hold with a
// self-signed certificate, or Unauthenticated.
func selfSignedPeer(ctx context.Context, method string) (identity.Peer, error) {
	p, ok := rpc.PeerFromContext(ctx)
	if !ok || p.Kind != identity.PeerSelfSigned {
		return identity.Peer{}, status.Errorf(codes.Unauthenticated, "%s needs a self-signed certificate of the caller's key in the TLS handshake", method)
	}
	return p, nil
}
