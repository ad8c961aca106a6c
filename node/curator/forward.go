package curator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/node/rpc"
	"cairn.dev/cairn/pkg/event"
	"cairn.dev/cairn/proto/api"
)

// servedLocally are the methods every curator answers itself, leader or
// not: Escrow's proof is bound to the caller's TLS session with this
// curator, and GetCurrentLeader is this curator's view of the election.
var servedLocally = map[string]bool{
	"/cairn.api.AAA/Escrow":               true,
	"/cairn.api.Curator/GetCurrentLeader": true,
	// Its proof is bound to the owner's session with this curator.
	"/cairn.api.Management/RotateOwnerKey": true,
}

// errNoLeader is what calls get while no curator leads.
var errNoLeader = status.Error(codes.Unavailable, "no curator leads at the moment (an election is under way); retry shortly")

// leaderWait is how long a call waits for an election to end before it
// is refused with errNoLeader.
const leaderWait = 5 * time.Second

// routeWaiting is route, but while nobody leads it waits up to leaderWait
// (or the call's end) for a leader.
func (c *curator) routeWaiting(ctx context.Context) (*grpc.ClientConn, leader) {
	conn, l := c.route()
	if l.NodeID != "" {
		return conn, l
	}
	wctx, cancel := context.WithTimeout(ctx, leaderWait)
	defer cancel()
	if _, err := event.Get(wctx, &c.leaders, event.Filter(func(l leader) bool { return l.NodeID != "" })); err != nil {
		return nil, leader{}
	}
	return c.route()
}

// errLeaderMoved is what a forwarded call gets from a curator that no
// longer leads: it is not passed on again, so that two curators that each
// think the other leads cannot bounce a call between them.
var errLeaderMoved = status.Error(codes.Unavailable, "the call reached a curator that no longer leads (leadership is moving); retry shortly")

// forwarded says whether the call of ctx was forwarded by another curator.
func forwarded(ctx context.Context) bool {
	return len(metadata.ValueFromIncomingContext(ctx, rpc.ForwardedPeerHeader)) > 0
}

// unaryInterceptor serves a call here when this curator leads, and
// forwards it to the leader otherwise, for the caller the rpc layer
// authenticated.
func (c *curator) unaryInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	c.nameLeader(func(md metadata.MD) { _ = grpc.SetTrailer(ctx, md) })
	// The caller is judged by its record once, by the curator that serves
	// the call, after the call started, so that a change of the record
	// committed before then is seen: here with a linearizable read
	// (checkCaller), or, for a call forwarded here, by the rpc layer's
	// trustForwarder, in the same read as the forwarder's record. A
	// curator that forwards a call does not read the record first: that
	// would be a second read per forwarded call (two thirds of a
	// cluster's heartbeats), on an etcd follower, where a linearizable
	// read also waits for a round trip to etcd's leader.
	serve := func() (any, error) {
		if !forwarded(ctx) {
			if err := c.checkCaller(ctx); err != nil {
				return nil, statusError(ctx, err)
			}
		}
		resp, err := handler(ctx, req)
		return resp, statusError(ctx, err)
	}
	if servedLocally[info.FullMethod] {
		return serve()
	}
	conn, l := c.routeWaiting(ctx)
	switch {
	case l.Local:
		return serve()
	case conn == nil:
		return nil, errNoLeader
	case forwarded(ctx):
		return nil, errLeaderMoved
	}
	p, _ := rpc.PeerFromContext(ctx)
	resp, err := newMessage(info.FullMethod, false)
	if err != nil {
		return nil, err
	}
	if err := conn.Invoke(rpc.WithForwardedPeer(ctx, p), info.FullMethod, req, resp); err != nil {
		return nil, forwardError(ctx, err)
	}
	return resp, nil
}

// forwardError is the error a forwarded call passes back to its caller. A
// call the caller did not cancel, cancelled here all the same, died with
// the connection to a leader that is no longer one: to the caller that is
// a leadership move, which it may retry, not a cancellation of its own.
func forwardError(ctx context.Context, err error) error {
	if status.Code(err) == codes.Canceled && ctx.Err() == nil {
		return status.Errorf(codes.Unavailable, "the call was forwarded to a curator that no longer leads (leadership is moving); retry shortly: %v", err)
	}
	return err
}

// streamInterceptor is unaryInterceptor for streams. Only streams of one
// request and many responses (Watch) are forwarded; the others are served
// locally.
func (c *curator) streamInterceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	c.nameLeader(ss.SetTrailer)
	ctx, release, err := c.whileHonoured(ss.Context())
	if err != nil {
		return statusError(ss.Context(), err)
	}
	defer release()
	return streamEnd(ctx, c.serveStream(srv, &honouredStream{ServerStream: ss, ctx: ctx}, info, handler))
}

// serveStream serves or forwards the stream ss.
func (c *curator) serveStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	ctx := ss.Context()
	if servedLocally[info.FullMethod] {
		return statusError(ctx, handler(srv, ss))
	}
	conn, l := c.routeWaiting(ctx)
	switch {
	case l.Local:
		return statusError(ctx, handler(srv, ss))
	case conn == nil:
		return errNoLeader
	case forwarded(ctx):
		return errLeaderMoved
	case info.IsClientStream:
		return status.Errorf(codes.Unimplemented, "%s: client streams are not forwarded to the leader", info.FullMethod)
	}
	p, _ := rpc.PeerFromContext(ctx)
	return forwardError(ctx, forwardStream(rpc.WithForwardedPeer(ctx, p), conn, info.FullMethod, ss))
}

// forwardStream passes the one request of ss to the same method on conn
// and every response back, until either end finishes.
func forwardStream(ctx context.Context, conn *grpc.ClientConn, method string, ss grpc.ServerStream) error {
	req, err := newMessage(method, true)
	if err != nil {
		return err
	}
	if err := ss.RecvMsg(req); err != nil {
		return fmt.Errorf("when receiving the request to forward: %w", err)
	}
	cs, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, method)
	if err != nil {
		return err
	}
	if err := cs.SendMsg(req); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	if err := cs.CloseSend(); err != nil {
		return err
	}
	for {
		resp, err := newMessage(method, false)
		if err != nil {
			return err
		}
		err = cs.RecvMsg(resp)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := ss.SendMsg(resp); err != nil {
			return fmt.Errorf("when passing on a response of the leader: %w", err)
		}
	}
}

// newMessage makes an empty request (input) or response message of a
// gRPC method ("/pkg.Service/Method") of the protobuf registry.
func newMessage(method string, input bool) (proto.Message, error) {
	svc, name, _ := strings.Cut(strings.TrimPrefix(method, "/"), "/")
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(svc + "." + name))
	if err != nil {
		return nil, status.Errorf(codes.Internal, "cannot forward %s: %v", method, err)
	}
	md, ok := d.(protoreflect.MethodDescriptor)
	if !ok {
		return nil, status.Errorf(codes.Internal, "cannot forward %s: not a method", method)
	}
	msg := md.Output()
	if input {
		msg = md.Input()
	}
	mt, err := protoregistry.GlobalTypes.FindMessageByName(msg.FullName())
	if err != nil {
		return nil, status.Errorf(codes.Internal, "cannot forward %s: %v", method, err)
	}
	return mt.New().Interface(), nil
}

// statusError gives a handler's error a gRPC code: status errors keep
// theirs, the end of the call's context its own, anything else (etcd out
// of reach, mostly) is Unavailable, with the whole wrapped message.
func statusError(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	if ctx.Err() != nil {
		return status.FromContextError(ctx.Err()).Err()
	}
	return status.Error(codes.Unavailable, err.Error())
}

// trustForwarder lets only consensus members forward calls: they can read
// the CA's key from etcd anyway, so trusting them grants nothing new. It
// also judges a caller with a node certificate (honoured), in the same
// linearizable read as the forwarder's record: the curator that forwarded
// the call did not read the caller's record (unaryInterceptor), so that a
// forwarded call costs one etcd read, at the leader, not one on each side.
// A forwarded heartbeat is judged like one made here (honours): from
// memory, or else with a serializable read.
func (c *curator) trustForwarder(ctx context.Context, forwarder, caller identity.Peer) error {
	judgeCaller := caller.Kind == identity.PeerNode
	method, _ := grpc.Method(ctx)
	beat := method == api.Curator_Heartbeat_FullMethodName
	now := time.Now()
	var read []clientv3.OpOption
	var tokens []honourToken
	if beat {
		member, ok := c.honours.known(forwarder, now)
		_, callerOK := c.honours.known(caller, now)
		if ok && member && (callerOK || !judgeCaller) {
			return nil
		}
		read = append(read, clientv3.WithSerializable())
		tokens = []honourToken{c.honours.token(forwarder.NodeID), c.honours.token(caller.NodeID)}
	}
	ops := []clientv3.Op{clientv3.OpGet(nodeKey(forwarder.NodeID), read...)}
	if judgeCaller {
		ops = append(ops, clientv3.OpGet(nodeKey(caller.NodeID), read...))
	}
	// A transaction of reads only is one read, linearizable unless every
	// read in it is serializable.
	resp, err := c.etcd.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		// Not a refusal: etcd did not answer (it may be electing a
		// leader), and the caller may try again.
		return statusError(ctx, fmt.Errorf("when reading the records of node %s and of its caller: %w", forwarder.NodeID, err))
	}
	n, _, err := nodeFrom(forwarder.NodeID, resp.Responses[0].GetResponseRange().GetKvs())
	if err := judgeRead(forwarder, n, err); err != nil {
		return err
	}
	if n.GetRoles().GetConsensusMember() == nil {
		return errors.New("it is not a consensus member")
	}
	if beat {
		c.honours.remember(tokens[0], n, now)
	}
	if judgeCaller {
		m, _, err := nodeFrom(caller.NodeID, resp.Responses[1].GetResponseRange().GetKvs())
		if err := judgeRead(caller, m, err); err != nil {
			return rpc.CallerRefused{Err: err}
		}
		if beat {
			c.honours.remember(tokens[1], m, now)
		}
	}
	return nil
}

// nameLeader sets the LeaderTrailer of a call through set, when this
// curator knows a leader.
func (c *curator) nameLeader(set func(metadata.MD)) {
	if _, l := c.route(); l.NodeID != "" {
		set(metadata.Pairs(rpc.LeaderTrailer, l.NodeID))
	}
}
