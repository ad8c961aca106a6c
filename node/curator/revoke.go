package curator

import (
	"bytes"
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/node/rpc"
	"cairn.dev/cairn/pkg/cancelon"
	"cairn.dev/cairn/proto/api"
	"cairn.dev/cairn/proto/private"
)

// A node certificate stays valid until it expires, but the cluster honours
// it only while its node is UP: every curator checks the caller's record in
// etcd before it serves a call made with a node certificate (honoured; for
// a forwarded call, the leader in the same read as the forwarder's record,
// trustForwarder), and ends a stream as soon as the record says otherwise
// (whileHonoured). So a node that is decommissioned or deleted is refused
// by the next call that starts after the change is committed, and its open
// streams end within one etcd watch delivery.

// honoured returns the record of the node whose certificate p is and the
// revision of etcd it was read at, or PermissionDenied when the cluster no
// longer honours that certificate: the node was deleted, is not UP
// (decommissioned), or is on record with another key.
func (c *curator) honoured(ctx context.Context, p identity.Peer, opts ...clientv3.OpOption) (*private.Node, int64, error) {
	resp, err := c.etcd.Get(ctx, nodeKey(p.NodeID), opts...)
	if err != nil {
		return nil, 0, fmt.Errorf("when reading node %s: %w", p.NodeID, err)
	}
	n, _, err := nodeFrom(p.NodeID, resp.Kvs)
	if err := judgeRead(p, n, err); err != nil {
		return nil, 0, err
	}
	return n, resp.Header.Revision, nil
}

// judgeRead is honoured's judgement of a read of p's record: n and err as
// getNode or nodeFrom return them.
func judgeRead(p identity.Peer, n *private.Node, err error) error {
	if status.Code(err) == codes.NotFound {
		return status.Errorf(codes.PermissionDenied, "node %s is not in the cluster (deleted); its certificate is no longer honoured", p.NodeID)
	}
	if err != nil {
		return err
	}
	return stillHonoured(p, n)
}

// stillHonoured is honoured's judgement of a record n already read.
func stillHonoured(p identity.Peer, n *private.Node) error {
	if !bytes.Equal(n.PublicKey, p.PublicKey) {
		return status.Errorf(codes.PermissionDenied, "node %s is on record with another key; its certificate is not honoured", p.NodeID)
	}
	if n.FsmState == api.NodeState_NODE_STATE_DECOMMISSIONED {
		// Marked (rpc.Decommissioned), so that the node, still running,
		// knows no answer will ever change and gives up its roles.
		return rpc.Decommissioned(codes.PermissionDenied, "node %s is %s; its certificate is no longer honoured", p.NodeID, n.FsmState)
	}
	if n.FsmState != api.NodeState_NODE_STATE_UP {
		return status.Errorf(codes.PermissionDenied, "node %s is %s; its certificate is no longer honoured", p.NodeID, n.FsmState)
	}
	return nil
}

// checkCaller refuses a call made with the certificate of a node the
// cluster no longer honours. Calls of owners and of callers without a
// cluster certificate pass: their methods judge them.
func (c *curator) checkCaller(ctx context.Context) error {
	p, ok := rpc.PeerFromContext(ctx)
	if !ok || p.Kind != identity.PeerNode {
		return nil
	}
	if method, _ := grpc.Method(ctx); method != api.Curator_Heartbeat_FullMethodName {
		_, _, err := c.honoured(ctx, p)
		return err
	}
	now := time.Now()
	if _, ok := c.honours.known(p, now); ok {
		return nil
	}
	t := c.honours.token(p.NodeID)
	n, _, err := c.honoured(ctx, p, clientv3.WithSerializable())
	if err == nil {
		c.honours.remember(t, n, now)
	}
	return err
}

// whileHonoured is checkCaller for a stream: it returns a context that
// ends, with the refusal as its cause, as soon as the caller's node
// record stops being honoured, and a func that releases what the watch
// holds. The stream must run under that context.
func (c *curator) whileHonoured(ctx context.Context) (context.Context, func(), error) {
	p, ok := rpc.PeerFromContext(ctx)
	if !ok || p.Kind != identity.PeerNode {
		return ctx, func() {}, nil
	}
	_, rev, err := c.honoured(ctx, p)
	if err != nil {
		return nil, nil, err
	}
	// From the revision of the read, not from the record's last change:
	// etcd compacts (every five minutes with Kubernetes, whose apiserver
	// compacts), and a record unchanged since would be watched from a
	// compacted revision, ending every stream of its node at once.
	open := func(ctx context.Context) <-chan clientv3.WatchResponse {
		return c.etcd.Watch(ctx, nodeKey(p.NodeID), clientv3.WithRev(rev+1))
	}
	sctx, stop := cancelon.Context(ctx, open, func(wr clientv3.WatchResponse) error {
		if err := wr.Err(); err != nil {
			return status.Errorf(codes.Unavailable, "cannot follow the record of node %s: %v", p.NodeID, err)
		}
		for _, e := range wr.Events {
			if err := revokedBy(p, e); err != nil {
				return err
			}
		}
		return nil
	})
	return sctx, stop, nil
}

// revokedBy says whether a change e of p's node record withdraws the
// honour of p's certificate, and how the stream is told.
func revokedBy(p identity.Peer, e *clientv3.Event) error {
	if e.Type == clientv3.EventTypeDelete {
		return status.Errorf(codes.PermissionDenied, "node %s was deleted; its certificate is no longer honoured", p.NodeID)
	}
	n := &private.Node{}
	if err := proto.Unmarshal(e.Kv.Value, n); err != nil {
		return status.Errorf(codes.Internal, "when decoding node %s: %v", p.NodeID, err)
	}
	return stillHonoured(p, n)
}

// honouredStream is a stream that runs under whileHonoured's context.
type honouredStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *honouredStream) Context() context.Context { return s.ctx }

// streamEnd is the error a stream under whileHonoured's ctx ends with:
// the refusal that ended it, if one did, else err.
func streamEnd(ctx context.Context, err error) error {
	if cause := context.Cause(ctx); cause != nil && cause != ctx.Err() {
		if _, ok := status.FromError(cause); ok {
			return cause
		}
		return fmt.Errorf("stream ended: %w", cause)
	}
	return err
}
